"""advisor capacity: the highest arrival rate of a deployment's own traffic at which every SLO holds."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from advisor.cli._app import app
from advisor.cli._common import EXIT_OK, PricePerHour, ReportFormat, err, fail, out, positive_finite
from advisor.option_help import ENGINE_CREDENTIALS_HELP, PROM_CREDENTIALS_HELP


@app.command()
def capacity(
    target: Annotated[Optional[str], typer.Option("--target", help="The engine's OpenAI-compatible base URL. " + ENGINE_CREDENTIALS_HELP)] = None,
    deployment: Annotated[Optional[Path], typer.Option("--deployment", help="A deployment spec: its baseline is measured (a Kubernetes one through kubernetes.url, its Service).")] = None,
    slo: Annotated[Optional[Path], typer.Option("--slo", help="SLO file: every latency SLO it sets (ttft_p95, tpot_p95, e2e_p99) and its error_rate must hold. Default: all four defaults.")] = None,
    workload_file: Annotated[Optional[Path], typer.Option("--workload", help="A workload YAML: the traffic shape (buckets, prefixes, burstiness, cancellations); its rate is what the search varies.")] = None,
    from_prom: Annotated[Optional[str], typer.Option("--from-prom", help="The deployment's Prometheus: its own traffic shape, and its current rate as the search's start. " + PROM_CREDENTIALS_HELP)] = None,
    window: Annotated[str, typer.Option("--window", help="With --from-prom: how much history shapes the workload.")] = "1h",
    model: Annotated[Optional[str], typer.Option("--model", help="Served model name. Default: the workload's, the spec's, else the target's first model.")] = None,
    start_rate: Annotated[Optional[float], typer.Option("--start-rate", callback=positive_finite, help="First rate tried, requests/s. Default: the production rate with --from-prom, else half the throughput of a closed-loop burst of 32 requests.")] = None,
    max_rate: Annotated[float, typer.Option("--max-rate", callback=positive_finite, help="Ceiling: a deployment that holds here is reported as 'at least' this.")] = 200.0,
    min_rate: Annotated[float, typer.Option("--min-rate", callback=positive_finite, help="Floor: a deployment that breaks here has capacity 0 for this SLO.")] = 0.05,
    width: Annotated[float, typer.Option("--width", help="Stop when the interval is within +-this share of its middle (0.1: +-10 %).")] = 0.10,
    trial_requests: Annotated[Optional[int], typer.Option("--trial-requests", min=10, help="Requests tallied per trial (plus half as many warmup). Default: 200, or what the strictest percentile needs (a p99: 299).")] = None,
    max_duration: Annotated[Optional[str], typer.Option("--max-duration", help="Guardrail: stop after this long (30m), with a partial answer and its interval.")] = None,
    max_requests: Annotated[Optional[int], typer.Option("--max-requests", min=1, help="Guardrail: stop after this many requests, with a partial answer.")] = None,
    peak: Annotated[Optional[float], typer.Option("--peak", callback=positive_finite, help="Plan for this peak, requests/s: replicas at the measured capacity per replica, and with a price, the monthly cost.")] = None,
    headroom: Annotated[float, typer.Option("--headroom", help="With --peak: run each replica at this share of its capacity.")] = 0.8,
    price_per_hour: PricePerHour = None,
    max_rate_multiple: Annotated[Optional[float], typer.Option("--max-rate-multiple", callback=positive_finite, help="Guardrail for a target serving users: never offer it more than this many times the production rate --from-prom measured.")] = None,
    save: Annotated[bool, typer.Option("--save", help="Record the answer in the store (ADVISOR_DB_URL), under the deployment spec's name: the dashboard and the weekly report show it for the advisor.yaml deployment of that name.")] = False,
    workers: Annotated[int, typer.Option("--workers", min=1, max=64, help="Load generator processes (for rates one core cannot hold).")] = 1,
    output: Annotated[ReportFormat, typer.Option("--output", "-o", help="text, json, markdown or html (the attainment chart inline).")] = ReportFormat.text,
    out_file: Annotated[Optional[Path], typer.Option("--out", help="Write the report to FILE instead of stdout.")] = None,
) -> None:
    """Find the highest arrival rate of the deployment's traffic at which every SLO holds, with an interval.

    Trials at one rate replay the same requests with fresh arrivals; a trial clearly holds, clearly breaks
    (one-sided bounds on each SLO's share of requests within it, over its autocorrelation) or is extended. The
    search doubles up to a break, halves down to a hold, then bisects between them until the interval is within
    --width, or until nothing between its ends can be told apart. Progress goes to stderr.

    Exit codes: 0 an answer (bounded, at least, or zero), 1 a partial answer (a guardrail or the load generator
    stopped it), 2 could not run.
    """
    from advisor import escape
    from advisor.app.capacity import CapacityRequest, deployment_name, run_capacity
    from advisor.settings import get_settings
    from advisor.store import open_store
    from advisor.errors import AdvisorError
    from advisor.units import parse_duration

    if save and deployment is None:
        raise fail("--save needs --deployment: an answer is kept under its deployment spec's name, which the "
                   "dashboard and the weekly report read")
    if out_file is not None and not out_file.parent.exists():
        raise fail(f"--out {out_file}: its folder does not exist")
    try:
        req = CapacityRequest(target=target, deployment=deployment, slo_file=slo, workload_file=workload_file,
                              from_prom=from_prom, window_s=parse_duration(window), model=model,
                              start_rate=start_rate, max_rate=max_rate, min_rate=min_rate, width=width,
                              trial_requests=trial_requests,
                              max_duration_s=parse_duration(max_duration) if max_duration else None,
                              max_requests=max_requests, peak=peak, headroom=headroom,
                              price_per_hour=price_per_hour, workers=workers, max_rate_multiple=max_rate_multiple)
        if save:
            open_store(get_settings().database_url).close()  # an unwritable store is said before the search
        result = run_capacity(req, say=lambda m: err.print(f"[dim]capacity:[/] {escape.markup(m)}", highlight=False))
        if save:
            with open_store(get_settings().database_url) as store:
                run_id = store.save_capacity(result, deployment=deployment_name(req))
            err.print(f"[dim]saved as capacity run {run_id}[/]")
    except (AdvisorError, ValueError) as e:
        raise fail(str(e)) from None
    from advisor.reports import capacity_text

    if output is ReportFormat.json:
        body = escape.json_text(result.model_dump(mode="json")) + "\n"
    elif output is ReportFormat.markdown:
        body = capacity_text.markdown(result)
    elif output is ReportFormat.html:
        body = capacity_text.html(result)
    else:
        body = capacity_text.text(result)
    if out_file is not None:
        out_file.write_text(body)
        err.print(f"wrote {escape.markup(str(out_file))}", highlight=False)
    else:
        out.print(body, end="", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(1 if result.status == "partial" else EXIT_OK)
