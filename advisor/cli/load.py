"""advisor load: replay a traffic shape against a target and measure TTFT/TPOT/ITL/E2E exactly."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from advisor import escape, interrupts
from advisor.cli._app import app
from advisor.cli._common import EXIT_OK, Output, check_store_early, err, fail, out, positive_finite
from advisor.option_help import ENGINE_CREDENTIALS_HELP, PROM_CREDENTIALS_HELP
from advisor.errors import AdvisorError

if TYPE_CHECKING:
    from probes.http import HttpConfig


def _model_of(target: str, http: HttpConfig) -> str:
    from advisor.loadgen.served import model_of

    try:
        return model_of(target, http)
    except AdvisorError as e:
        raise fail(str(e)) from None


def _context_of(target: str, model: str, http: HttpConfig) -> int | None:
    from advisor.loadgen.served import context_of

    return context_of(target, model, http)


PREPARE_BUDGET_S = 120.0


def run_budget(job) -> float:
    """The run's stated limit: its schedule (or duration), then the last request's own deadline."""
    span = job.duration_s or max((r.at_s or 0.0 for r in job.requests), default=0.0)
    return span + job.target.request_timeout_s + 60


@app.command()
def load(
    target: Annotated[str, typer.Option("--target", help="The engine's OpenAI-compatible base URL, e.g. http://127.0.0.1:8000. " + ENGINE_CREDENTIALS_HELP)],
    workload_file: Annotated[Optional[Path], typer.Option("--workload", help="A workload YAML: buckets, prefix, arrival, cancellation, duration, seed.")] = None,
    from_prom: Annotated[Optional[str], typer.Option("--from-prom", help="Build the workload from this Prometheus: the deployment's own length histograms, prefix hit rate and arrival rate. " + PROM_CREDENTIALS_HELP)] = None,
    from_trace: Annotated[Optional[Path], typer.Option("--from-trace", help="Replay a trace: JSONL (timestamp, prompt_tokens, output_tokens, prefix_id), Mooncake JSONL or Azure CSV.")] = None,
    duration: Annotated[Optional[str], typer.Option("--duration", help="Run length, e.g. 60s or 5m (overrides the workload's).")] = None,
    rate: Annotated[Optional[float], typer.Option("--rate", callback=positive_finite, help="Requests per second, above 0 (overrides the workload's open-loop rate).")] = None,
    concurrency: Annotated[Optional[int], typer.Option("--concurrency", min=1, help="Closed loop: keep this many requests in flight instead of a rate (at least 1).")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="Served model name. Default: the workload's, else the target's first model.")] = None,
    window: Annotated[str, typer.Option("--window", help="With --from-prom: how much history shapes the workload.")] = "1h",
    warmup: Annotated[Optional[str], typer.Option("--warmup", help="Exclude requests scheduled in the first N seconds, e.g. 5s (0 for none).")] = None,
    export: Annotated[Optional[Path], typer.Option("--export", help="Write every request's record to FILE (.jsonl, .csv or .parquet); its folder is checked before the run.")] = None,
    save: Annotated[bool, typer.Option("--save", help="Keep the run and its samples in the store.")] = False,
    workers: Annotated[int, typer.Option("--workers", min=1, max=64, help="Processes that share the one arrival process (requests dealt round-robin, one clock): about one core each, for rates one core cannot hold. Validity is judged over all of them.")] = 1,
    output: Annotated[Output, typer.Option("--output", "-o", help="text: a summary table by bucket; json: the summary with generator validity.")] = Output.text,
) -> None:
    """Replay a workload against a target and report client-side TTFT, TPOT, ITL, E2E and goodput per bucket.

    Every request has a deadline (its timeout covers connect, headers and the whole stream). The command stops
    after at most 120s + 12 x $ADVISOR_TIMEOUT to prepare, and the schedule plus one request deadline plus 60s
    to run.

    Exit codes: 0 the run was valid, 1 the load generator fell behind (results invalid), 2 could not run.
    """
    from advisor.loadgen import execute
    from advisor.loadgen.loop import run_load
    from advisor.settings import get_settings
    from advisor.units import parse_duration
    from advisor.workload.spec import WorkloadError

    if sum(x is not None for x in (workload_file, from_prom, from_trace)) != 1:
        raise fail("give exactly one of --workload, --from-prom or --from-trace")
    settings = get_settings()
    try:
        duration_s = parse_duration(duration) if duration else None
        warmup_s = parse_duration(warmup, allow_zero=True) if warmup else None
        window_s = parse_duration(window)
        # The load generator's own ceilings (advisor/units.py), before any workload is read or planned.
        execute.check_options(duration_s=duration_s, rate=rate, concurrency=concurrency, warmup_s=warmup_s,
                              window_s=window_s)
    except ValueError as e:
        raise fail(str(e)) from None
    if export:  # before the run: a bad destination must not cost the results
        try:
            execute.check_export(export)
        except execute.LoadError as e:
            raise fail(str(e)) from None
    check_store_early(save)
    from advisor import net

    try:  # credentials in the URLs are split off here: only the credential-free URLs go further
        target, http = net.target(target, "engine", "--target")
        from_prom, prom_http = net.target(from_prom, "prom", "--from-prom") if from_prom else (None, None)
    except AdvisorError as e:
        raise fail(str(e)) from None
    prepare_budget = interrupts.budget(PREPARE_BUDGET_S + 12 * settings.timeout,
                                       "preparing the load (workload, prompt sizing)")
    try:
        with prepare_budget:
            job = execute.prepare(target, workload_file=workload_file, from_prom=from_prom, from_trace=from_trace,
                                  duration_s=duration_s, rate=rate, concurrency=concurrency, window_s=window_s,
                                  warmup_s=warmup_s, model=model or None, timeout=settings.timeout,
                                  model_lookup=lambda t, timeout: _model_of(t, http.with_(timeout=timeout)),
                                  context_lookup=lambda t, m, timeout: _context_of(t, m, http.with_(timeout=timeout)),
                                  http=http, prom_http=prom_http)
    except (WorkloadError, execute.LoadError) as e:
        raise fail(str(e)) from None
    if output is Output.json:
        err.print(f"[dim]{escape.markup(job.describe())}[/]", highlight=False)
    with interrupts.budget(run_budget(job), "the load run"):
        if workers > 1:
            result = execute.run_workers_with_progress(job, err, workers)
        else:
            result = run_load(execute.run_with_progress(job, err))
    if result.summary.overall.requests == 0:
        raise fail(f"no request reached {target}: {next(iter(result.summary.errors_seen), 'nothing was sent')}")
    if export:
        try:
            execute.export(result, export)
        except ValueError as e:
            raise fail(str(e)) from None
        err.print(f"[dim]wrote {len(result.run.records)} records to {escape.markup(export)}[/]", highlight=False)
    if save:
        from advisor.store import StoreError, open_store

        try:
            with open_store(settings.database_url) as store:
                run_id = store.save_load_run(job.workload, result.summary, result.run.records, target=target,
                                             model=job.target.model, started_at=result.started_at,
                                             wall_s=result.run.wall_s, manifest=result.manifest)
        except StoreError as e:
            raise fail(str(e)) from None
        err.print(f"[dim]saved as load run {run_id}[/]")
    if output is Output.json:
        print(escape.json_text({"workload": job.workload.model_dump(mode="json"), "manifest": result.manifest,
                                **result.summary.model_dump(mode="json")}))
    else:
        from advisor.reports.load_text import render

        render(result.summary, job, out)
    raise typer.Exit(EXIT_OK if result.summary.generator.valid else 1)
