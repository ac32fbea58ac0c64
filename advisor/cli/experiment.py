"""advisor experiment: prove or refute one mechanism with an A/B experiment on the real deployment."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from advisor.cli._app import app
from advisor.ranges import BLOCKS_MAX, STORE_ID_MAX, WARMUP_MAX
from advisor.cli._common import EXIT_OK, Baseline, Output, PricePerHour, err, fail, out, positive_finite

Deployment = Annotated[Path, typer.Option("--deployment", help="Deployment YAML: engine, model, launcher (local: command, args, env, port, arms, owns_process: whether the advisor may stop the process found serving the port; endpoints: baseline and candidate URLs).")]


def _say(prefix: str):
    from advisor import escape

    return lambda m: err.print(f"[dim]{prefix}{escape.markup(m)}[/]", highlight=False)


def _recovered(note: str) -> None:
    from advisor import escape

    err.print(f"[yellow]recovered:[/] {escape.markup(note)}", highlight=False)


@app.command()
def experiment(
    deployment: Deployment,
    mechanism: Annotated[Optional[str], typer.Option("--mechanism", help="The one knob to change: max_num_seqs, max_num_batched_tokens, chunked_prefill, prefix_caching, kv_cache_dtype, quantization, speculative, tensor_parallel, data_parallel, replicas, gpu_memory_utilization, scheduling_policy, enforce_eager. Required unless --aa or --plan.")] = None,
    value: Annotated[Optional[str], typer.Option("--value", help="The candidate's value (JSON or text: 8, true, fp8, '{\"method\": \"ngram\"}'); for quantization, the candidate's model file or folder (a GGUF, a safetensors checkpoint), swapped in for the baseline's and nothing else. Default: derived from what the baseline runs and the direction the knob's catalog entry (or the diagnosis's check) prescribes; a candidate equal to the baseline is refused.")] = None,
    workload_file: Annotated[Optional[Path], typer.Option("--workload", help="Workload YAML replayed on both arms. Default: one suited to the mechanism.")] = None,
    from_prom: Annotated[Optional[str], typer.Option("--from-prom", help="Build the workload from the deployment's own telemetry in this Prometheus.")] = None,
    blocks: Annotated[Optional[int], typer.Option("--blocks", min=2, max=BLOCKS_MAX, help="Most blocks per arm (interleaved A B B A ...), at least 2; the block is the unit of replication. Default: planned for --effect at 80% power from the target's A/A calibration (or a stated conservative default).")] = None,
    block_requests: Annotated[Optional[int], typer.Option("--block-requests", min=1, help="Requests per block. Default: the workload's (32 for the default workload), raised where a p95/p99 primary needs more samples beyond it; given, a design that cannot have them is refused.")] = None,
    effect: Annotated[float, typer.Option("--effect", min=0.01, max=5.0, help="The effect the plan must detect at 80% power, as a fraction of the primary (0.3: a ratio of 1.3).")] = 0.3,
    fixed: Annotated[bool, typer.Option("--fixed", help="Run every planned block (one look at the end) instead of stopping at the first decisive look.")] = False,
    aa: Annotated[bool, typer.Option("--aa", help="A/A run: both arms run the baseline's configuration (endpoints: candidate = the baseline's URL, or a second endpoint serving the baseline's configuration: then the A/A run also measures how far apart the two environments are, and every later A/B between them reports it). Measures the target's block-to-block noise per readout and stores it for later plans; a verdict other than 'no change' or 'inconclusive' means the arms are not alike.")] = False,
    plan_only: Annotated[bool, typer.Option("--plan", help="Print the blocks and requests per block needed for --effect at 80% power (for --mechanism's primary, else for every readout), from the stored A/A calibration, and touch nothing.")] = False,
    concurrency: Annotated[int | None, typer.Option(
        "--concurrency", min=1, help="Requests in flight with the default workload: 8, or for max_num_seqs the "
                              "candidate's slot count, so that only the baseline queues.")] = None,
    warmup: Annotated[int, typer.Option("--warmup", min=0, max=WARMUP_MAX, help="Requests sent to each arm before its first block, not measured (0 for none).")] = 16,
    direction: Annotated[Optional[str], typer.Option("--direction", help="Which way a diagnosis check moves the mechanism (up, down, on, off); the derived candidate follows it. Default: the knob catalog's.")] = None,
    diagnosis_id: Annotated[Optional[int], typer.Option("--diagnosis", min=1, max=STORE_ID_MAX, help="Link the stored experiment to this saved diagnosis (the dashboard's 'prove this check').")] = None,
    readout_signal: Annotated[Optional[str], typer.Option("--readout", help="Primary readout as a signal name (ttft_p95, tpot_p95, e2e_p99...). Default: the mechanism's. 'capacity': search each arm for the highest arrival rate at which every SLO of --slo holds (trials in turn on both arms) and judge the ratio of the two capacities with its interval.")] = None,
    slo: Annotated[Optional[Path], typer.Option("--slo", help="With --readout capacity: the SLO file whose SLOs (ttft_p95, tpot_p95, e2e_p99, error_rate) the capacity holds. Default: every default SLO.")] = None,
    width: Annotated[float, typer.Option("--width", min=0.01, max=0.49, help="With --readout capacity: each arm's search stops when its interval is within +-this share of its middle.")] = 0.10,
    start_rate: Annotated[Optional[float], typer.Option("--start-rate", callback=positive_finite, help="With --readout capacity: the rate both searches try first, requests/s (a capacity you measured before). Default: half the throughput of a closed-loop burst of 32 requests on the baseline.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan (both arms' argv, workload, blocks, guardrails) and touch nothing.")] = False,
    save: Annotated[bool, typer.Option("--save/--no-save", help="Keep every block's samples in the store.")] = True,
    max_duration: Annotated[Optional[str], typer.Option("--max-duration", help="Guardrail: abort past this long (30s, 30m, 1h). Default: the deployment's guardrails.max_duration, else 30m.")] = None,
    max_requests: Annotated[Optional[int], typer.Option("--max-requests", min=1, help="Guardrail: abort before a block would pass this many requests in all. Default: the deployment's guardrails.max_requests, else 5000.")] = None,
    max_error_rate: Annotated[Optional[float], typer.Option("--max-error-rate", min=0.0, max=1.0, help="Guardrail: abort when a block's share of failed requests is above this (0-1). Default: the deployment's guardrails.max_error_rate, else 0.2.")] = None,
    output: Annotated[Output, typer.Option("--output", "-o", help="text, or json with verdict, primary_metric, ratio, ci, metrics and manifest.")] = Output.text,
    price_per_hour: PricePerHour = None,
    baseline: Annotated[Baseline, typer.Option("--baseline", help="The baseline arm with parallel local arms: auto (a fresh replica, started like the candidate, when the engine found serving has traffic of its own and the host has room; refused before anything starts when it has not), fresh (always such a replica), found (the engine found serving, its outside traffic counted per block). local.baseline_port always means fresh.")] = Baseline.auto,
) -> None:
    """Run baseline against a candidate that changes exactly one mechanism, on the same workload, and judge it.

    The baseline is restored and verified healthy on success, failure, abort and interrupt (a second
    Ctrl-C waits for the restore). Only processes the advisor started are stopped: with arms: sequential
    a port already served by a process it did not start is refused before anything starts, unless the
    deployment says local.owns_process: true (then that process may be stopped and the baseline restarted
    from the spec); arms: parallel never stops the baseline.
    Exit codes: 0 finished (any verdict), 1 aborted (guardrail or interrupt), 2 could not start (bad input).
    """
    from advisor.app import experiment as service
    from advisor.errors import AdvisorError
    from advisor.escape import json_text
    from advisor.reports.experiment_text import render, render_plan, render_plans

    try:
        request = service.ExperimentRequest(
            deployment=deployment, mechanism=mechanism, value=value, workload=workload_file, from_prom=from_prom,
            blocks=blocks, block_requests=block_requests, effect=effect, fixed=fixed, aa=aa, concurrency=concurrency,
            warmup=warmup, direction=direction, diagnosis_id=diagnosis_id, readout=readout_signal, slo=slo,
            width=width, start_rate=start_rate, save=save,
            max_duration=max_duration, max_requests=max_requests, max_error_rate=max_error_rate,
            price_per_hour=price_per_hour, baseline=baseline.value)
        if plan_only and not mechanism and not aa:
            render_plans(service.plans(request), out, output is Output.json)
            raise typer.Exit(EXIT_OK)
        if dry_run or plan_only:
            d = service.design(request)
            if output is Output.json:
                print(json_text(service.summary(d).model_dump(mode="json")))
            else:
                render_plan(d, out, service.arm_manifests(d))
            raise typer.Exit(EXIT_OK)
        result = service.run(request, say=_say("\\[experiment] "), note=_recovered)
    except AdvisorError as e:
        raise fail(str(e)) from None
    if output is Output.json:
        print(json_text(result.model_dump(mode="json")))
    else:
        render(result, out)
    raise typer.Exit(EXIT_OK if result.status == "finished" else 1)


@app.command()
def recover(deployment: Deployment) -> None:
    """Leave the target as the journal says an unfinished experiment found it (also done at every experiment's start).

    Stops only processes the advisor journalled starting, each after checking that the process now at
    that pid has the journalled create time and command line (a reused pid is left alone, and said so);
    never what it merely finds listening. Starts the baseline again only where the advisor had stopped
    it (local.owns_process), and nothing that was not serving when the experiment began. On Kubernetes
    (launcher: kubernetes) it deletes the arms the journal records creating, each only if the live object
    has the journalled UID and this experiment's labels. Prints what it did.

    Exit codes: 0 restored or nothing to do, 2 could not restore.
    """
    from advisor.errors import AdvisorError
    from advisor.experiments.design.deployment import load_deployment
    from advisor.experiments.arms.journal import Journal, TargetLock
    from advisor.experiments.arms.recovery import recover as do_recover
    from advisor.experiments.run.session import checked_state_dir

    try:
        dep = load_deployment(deployment)
        directory = checked_state_dir(dep.key)
        with TargetLock(directory):
            note = do_recover(dep, Journal(directory), directory / "logs", _say(""))
    except AdvisorError as e:
        raise fail(str(e)) from None
    out.print(note or "nothing to recover: the last experiment on this target finished cleanly", markup=False,
              highlight=False)
