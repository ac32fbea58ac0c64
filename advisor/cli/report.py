"""advisor report: saved diagnoses and experiments, and the weekly report, as HTML or markdown files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from advisor.cli._app import app
from advisor.ranges import STORE_ID_MAX
from advisor.cli._common import err, fail
from advisor.errors import AdvisorError

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
def report_diagnosis(diagnosis_id: Annotated[int, typer.Argument(min=1, max=STORE_ID_MAX, help="A saved diagnosis' id (diagnose --save "
                                                                        "prints it; the dashboard shows it).")],
                     out: Out) -> None:
    """A saved diagnosis: symptoms with evidence and PromQL, ranked checks, and for each experiment
    run for it a forest plot, per-block values of both arms, its looks, manifest and restore status."""
    from advisor.reports.documents import format_of, stored_diagnosis
    from advisor.settings import get_settings
    from advisor.store import open_store

    try:
        fmt = format_of(out)
        with open_store(get_settings().database_url) as store:
            text = stored_diagnosis(store, diagnosis_id, fmt)
        _write(out, text)
    except AdvisorError as e:
        raise fail(str(e)) from None


@report_app.command("experiment")
def report_experiment(experiment_id: Annotated[int, typer.Argument(min=1, max=STORE_ID_MAX, help="A stored experiment's id.")],
                      out: Out) -> None:
    """A stored experiment: its verdict, every readout with its interval, the looks, the client and
    server readouts per arm and per block, the design and the manifest. HTML (with its forest plot
    and per-block chart) or markdown."""
    from advisor.reports.documents import format_of, stored_experiment
    from advisor.settings import get_settings
    from advisor.store import open_store

    try:
        fmt = format_of(out)
        with open_store(get_settings().database_url) as store:
            text = stored_experiment(store, experiment_id, fmt)
        _write(out, text)
    except AdvisorError as e:
        raise fail(str(e)) from None


ConfigOpt = Annotated[Optional[Path], typer.Option("--config", help="advisor.yaml: the deployments to report on. Default: $ADVISOR_CONFIG.")]


@report_app.command("weekly")
def report_weekly(out: Out, config: ConfigOpt = None,
                  deployment: Annotated[Optional[str], typer.Option("--deployment", help="Only this deployment of advisor.yaml.")] = None,
                  since: Annotated[str, typer.Option("--since", help="The period covered, against the same period before it: 7d, 24h.")] = "7d") -> None:
    """The weekly report: per deployment, SLO attainment, daily TTFT/TPOT/E2E percentiles against the
    period before (charts), findings that appeared, persisted or disappeared, experiments and their
    verdicts, the next change to make and whether it is proven, and the drift of the traffic shape.

    Reads each deployment's Prometheus (at past instants) and the store. A deployment whose
    Prometheus cannot be read gets a line saying so; the others are reported."""
    from advisor.fleet.config import load_config
    from advisor.app.weekly import weekly_report
    from advisor.reports.documents import format_of
    from advisor.settings import get_settings
    from advisor.store import open_store
    from advisor.units import parse_duration

    try:
        fmt = format_of(out)
        try:
            from advisor.fleet.config import REPORT_PERIOD_WHY
            from advisor.units import MAX_REPORT_PERIOD_S, check_ceiling

            period = check_ceiling(parse_duration(since), MAX_REPORT_PERIOD_S, "the period", REPORT_PERIOD_WHY)
        except ValueError as e:
            raise AdvisorError(f"--since: {e}") from None
        cfg = load_config(config)
        if deployment is not None and cfg.get(deployment) is None:
            raise AdvisorError(f"--deployment {deployment!r} is not in advisor.yaml (known: {', '.join(cfg.names)})")
        with open_store(get_settings().database_url) as store:
            text = weekly_report(cfg, store, fmt, deployment, period)
        _write(out, text)
    except AdvisorError as e:
        raise fail(str(e)) from None
