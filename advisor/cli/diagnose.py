"""advisor diagnose: symptoms and ranked checks."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from advisor import escape
from advisor.cli._app import app
from advisor.cli._common import (
    Baseline,
    EXIT_FOUND,
    EXIT_OK,
    At,
    Engine,
    EngineUrl,
    Model,
    PricePerHour,
    PromUrl,
    ReportFormat,
    Window,
    err,
    fail,
    out,
)
from advisor.app.diagnose import UsageProblem
from advisor.errors import AdvisorError


@app.command()
def diagnose(
    prom_url: PromUrl = None,
    url: EngineUrl = None,
    window: Window = None,
    model: Model = None,
    at: At = None,
    engine: Engine = None,
    slo: Annotated[Optional[Path], typer.Option("--slo", help="YAML file of SLOs: ttft_p95, tpot_p95, e2e_p99 (seconds), error_rate (0-1), goodput_min (req/s). Default: ADVISOR_SLO_FILE, else built-in defaults.")] = None,
    rules_config: Annotated[Optional[Path], typer.Option("--rules-config", help="YAML of per-rule overrides: {ADV001: {params: {...}, severity: {thresholds: {...}}, enabled: false}}.")] = None,
    output: Annotated[ReportFormat, typer.Option("--output", "-o", help="text for people, json for machines, markdown for tickets, html for a self-contained page with charts.")] = ReportFormat.text,
    out_file: Annotated[Optional[Path], typer.Option("--out", help="Write the report to this file instead of stdout (the exit code stays the diagnosis').")] = None,
    save: Annotated[bool, typer.Option("--save", help="Record this diagnosis in the store (ADVISOR_DB_URL, default SQLite in the data dir) for the dashboard and weekly report.")] = False,
    deployment: Annotated[Optional[Path], typer.Option("--deployment", help="Deployment YAML of the diagnosed target: needed by --experiment, and its flags are the configuration the checks consider.")] = None,
    experiments: Annotated[int, typer.Option("--experiment", min=0, help="Run A/B experiments for the top N testable checks and put their verdicts into the diagnosis (needs --deployment).")] = 0,
    blocks: Annotated[Optional[int], typer.Option("--blocks", help="With --experiment: the most blocks per arm of each experiment (2 or more), to bound its time; a run that reaches it undecided is inconclusive. Default: planned per check from the target's A/A calibration.")] = None,
    workload_file: Annotated[Optional[Path], typer.Option("--workload", help="Workload YAML that every experiment replays, instead of the traffic shape read from Prometheus (which cannot show, say, shared prefixes while prefix caching is off). Needs --experiment.")] = None,
    price_per_hour: PricePerHour = None,
    baseline: Annotated[Baseline, typer.Option("--baseline", help="Each experiment's baseline arm with parallel local arms: auto (a fresh replica when the engine found serving has traffic of its own and the host has room, else refused before anything starts), fresh, or found (the busy engine measured anyway, its outside traffic reported).")] = Baseline.auto,
) -> None:
    """Recognise the deployment's symptoms and rank the checks the optimisation map prescribes.

    Exit codes: 0 healthy (every SLO holds; warnings of a signal near its SLO, at 80 % by default, leave
    it healthy: "healthy, with N warnings", also in JSON as summary and warnings), 1 symptoms found,
    2 could not diagnose (unreachable, no data, bad input).
    """
    from advisor.app.diagnose import DiagnoseRequest, diagnose as run_diagnosis
    from advisor.app.snapshot import Source

    def say(message: str) -> None:
        err.print(f"[dim]{escape.markup(message)}[/]", highlight=False)

    def progress(target: str, done: float, total: float) -> None:
        say(f"sampling {target}/metrics: {done:.0f}/{total:.0f}s")

    request = DiagnoseRequest(
        source=Source(prom_url=prom_url, url=url, window=window, model=model, at=at, engine=engine),
        slo=slo, rules_config=rules_config, deployment=deployment, experiments=experiments, blocks=blocks,
        workload=workload_file, price_per_hour=price_per_hour, baseline=baseline.value, save=save)
    try:
        if out_file is not None and output is ReportFormat.text:
            raise UsageProblem("--out writes --output json, markdown or html; text is for the terminal")
        outcome = run_diagnosis(request, say=say, progress=progress)
        result, name = outcome.diagnosis, outcome.stored_as
        document = None
        if outcome.saved_id is not None:
            err.print(f"[dim]saved as diagnosis {outcome.saved_id}[/]")
            if output is ReportFormat.html:  # with the stored experiments' every block
                from advisor.reports.documents import stored_diagnosis
                from advisor.settings import get_settings
                from advisor.store import open_store

                with open_store(get_settings().database_url) as store:
                    document = stored_diagnosis(store, outcome.saved_id, "html")
        if output is ReportFormat.json:
            document = escape.json_text({"healthy": result.healthy, "summary": result.summary,
                                         "warnings": result.warnings, "top_severity": result.top_severity,
                                         **result.model_dump(mode="json"),
                                         "experiments": [r.model_dump(mode="json") for r in outcome.experiments]})
        elif output in (ReportFormat.markdown, ReportFormat.html) and document is None:
            from advisor.reports.documents import diagnosis_document

            document = diagnosis_document(result, output.value, deployment=name, results=outcome.experiments)
        if out_file is not None:
            from advisor.reports.documents import write

            write(out_file, document + "\n")
            err.print(f"[dim]wrote {escape.markup(str(out_file))}[/]", highlight=False)
    except AdvisorError as e:
        raise fail(str(e)) from None
    if out_file is None and document is not None:
        print(document)
    elif out_file is None:
        from advisor.reports.diagnosis_text import render as render_text

        render_text(result, out, outcome.experiments)
    raise typer.Exit(EXIT_OK if result.healthy else EXIT_FOUND)
