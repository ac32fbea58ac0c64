"""advisor diagnose: symptoms and ranked checks."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from advisor import escape
from advisor.cli._app import app
from advisor.cli._common import (
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
    check_store_early,
    err,
    fail,
    out,
    take_snapshot,
)
from advisor.errors import AdvisorError
from advisor.settings import get_settings


class UsageProblem(AdvisorError):
    """Options that do not go together, or a target with nothing to diagnose."""


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
    workload_file: Annotated[Optional[Path], typer.Option("--workload", help="Workload YAML that every experiment replays, instead of the traffic shape read from Prometheus (which cannot show, say, shared prefixes while prefix caching is off). Needs --experiment.")] = None,
    price_per_hour: PricePerHour = None,
) -> None:
    """Recognise the deployment's symptoms and rank the checks the optimisation map prescribes.

    Exit codes: 0 healthy (every SLO holds; warnings of a signal near its SLO, at 80 % by default, leave
    it healthy: "healthy, with N warnings", also in JSON as summary and warnings), 1 symptoms found,
    2 could not diagnose (unreachable, no data, bad input).
    """
    from advisor.diagnosis import diagnose as run_diagnosis
    from advisor.diagnosis import load_overrides, load_rules, load_slo, per_replica_signals
    settings = get_settings()
    try:
        slo_spec = load_slo(slo or settings.slo_file)
        overrides = load_overrides(rules_config or settings.rules_config) if (rules_config or settings.rules_config) else {}
        rules = load_rules(overrides=overrides)
        # Every input is checked before the target is read.
        if experiments and not deployment:
            raise UsageProblem("--experiment needs --deployment (how to launch the candidate)")
        if workload_file and not experiments:
            raise UsageProblem("--workload is what the experiments replay: it needs --experiment N")
        if out_file is not None and output is ReportFormat.text:
            raise UsageProblem("--out writes --output json, markdown or html; text is for the terminal")
        dep = None
        if deployment:
            from advisor.experiments.deployment import load_deployment

            dep = load_deployment(deployment)
        workload = None
        if workload_file:
            from advisor.workload.spec import load_workload

            workload = load_workload(workload_file)
        from advisor.cost import diagnosis_cost, price_for

        price = price_for(price_per_hour, (dep.cost if dep else None, f"deployment spec {deployment}"))
        check_store_early(save)
        # Only what the rules read replica by replica is broken down: at 64 replicas the full
        # breakdown is most of the query time (benchmarks/README.md).
        snap = take_snapshot(prom_url, url, window, model, at, engine, per_replica=per_replica_signals(rules))
        if not any(s.present for s in snap.signals.values()):
            raise UsageProblem(f"{snap.target} returned no data for any signal in the window: nothing to diagnose")
        from advisor.models import served_structure

        structure, why_not = served_structure(snap, dep)
        from advisor.workload.tokenize_cost import for_snapshot

        engine_url = url or (dep.baseline_url if dep else None)
        if at:  # the tokenizer as it is now says nothing about a past window's TTFT
            tokenization, tok_note = None, "a diagnosis of a past window (--at) does not time the live target"
        else:
            if engine_url:
                err.print("[dim]timing the target's /tokenize at the deployment's prompt lengths[/]", highlight=False)
            tokenization, tok_note = for_snapshot(snap, engine_url, timeout=settings.timeout)
        result = run_diagnosis(snap, rules, slo_spec, model=structure, model_note=why_not,
                               tokenization=tokenization, tokenization_note=tok_note)
        result.cost, result.cost_note = diagnosis_cost(snap, slo_spec, price)
        if experiments:
            from advisor.experiments.checks import verify_top_checks

            verify_top_checks(result, dep, experiments, price=price, workload=workload,
                              say=lambda m: err.print(f"[dim]{escape.markup(m)}[/]", highlight=False))
        document = None
        if save:
            from advisor.store import open_store

            with open_store(settings.database_url) as store:
                run_id = store.save_diagnosis(result, snap, deployment=dep.name if dep else None)
                err.print(f"[dim]saved as diagnosis {run_id}[/]")
                if output is ReportFormat.html:  # with the stored experiments' every block
                    from advisor.reports.documents import stored_diagnosis

                    document = stored_diagnosis(store, run_id, "html")
        if output is ReportFormat.json:
            document = escape.json_text({"healthy": result.healthy, "summary": result.summary,
                                         "warnings": result.warnings, "top_severity": result.top_severity,
                                         **result.model_dump(mode="json")})
        elif output in (ReportFormat.markdown, ReportFormat.html) and document is None:
            from advisor.reports.documents import diagnosis_document

            document = diagnosis_document(result, output.value, deployment=dep.name if dep else None)
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

        render_text(result, out)
    raise typer.Exit(EXIT_OK if result.healthy else EXIT_FOUND)
