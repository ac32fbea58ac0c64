"""advisor report: saved diagnoses and experiments, and the weekly report, as HTML or markdown files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from advisor.cli._app import app
from advisor.cli._common import err, fail
from advisor.errors import AdvisorError
from advisor.settings import get_settings

report_app = typer.Typer(help="Reports from the store: a diagnosis, an experiment, the weekly report. "
                              "HTML files are self-contained (styles and SVG charts inline; they open offline).",
                         no_args_is_help=True)
app.add_typer(report_app, name="report")

Out = Annotated[Path, typer.Option("--out", help="File to write: .html (with charts) or .md.")]


def _write(out: Path, text: str) -> None:
    from advisor.reports.documents import write

    write(out, text)
    err.print(f"[dim]wrote {out}[/]", highlight=False)


@report_app.command("diagnosis")
def report_diagnosis(diagnosis_id: Annotated[int, typer.Argument(help="A saved diagnosis' id (diagnose --save "
                                                                        "prints it; the dashboard shows it).")],
                     out: Out) -> None:
    """A saved diagnosis: symptoms with evidence and PromQL, ranked checks, and for each experiment
    run for it a forest plot, per-block values of both arms, its looks, manifest and restore status."""
    from advisor.reports.documents import format_of, stored_diagnosis
    from advisor.store import open_store

    try:
        fmt = format_of(out)
        with open_store(get_settings().database_url) as store:
            text = stored_diagnosis(store, diagnosis_id, fmt)
        _write(out, text)
    except AdvisorError as e:
        raise fail(str(e)) from None


@report_app.command("experiment")
def report_experiment(experiment_id: Annotated[int, typer.Argument(help="A stored experiment's id.")],
                      out: Out) -> None:
    """A stored experiment as a self-contained HTML page."""
    from advisor.reports.documents import ReportError, format_of, stored_experiment
    from advisor.store import open_store

    try:
        if format_of(out) != "html":
            raise ReportError("an experiment report is HTML: use a .html file name")
        with open_store(get_settings().database_url) as store:
            text = stored_experiment(store, experiment_id)
        _write(out, text)
    except AdvisorError as e:
        raise fail(str(e)) from None
