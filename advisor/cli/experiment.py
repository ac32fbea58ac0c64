"""advisor experiment: prove or refute one mechanism with an A/B experiment on the real deployment."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated, Optional

import typer

from advisor.cli._app import app
from advisor.cli._common import EXIT_OK, Output, check_store_early, err, fail, out
from advisor.settings import get_settings

Deployment = Annotated[Path, typer.Option("--deployment", help="Deployment YAML: engine, model, launcher (local: command, args, env, port, arms, owns_process: whether the advisor may stop the process found serving the port; endpoints: baseline and candidate URLs).")]


def state_dir(key: str) -> Path:
    return get_settings().data_dir / "experiments" / key


def _state_dir_checked(key: str) -> Path:
    """The target's journal and lock folder, shown writable before anything starts (one line if not)."""
    from advisor.store import StoreError
    from advisor.store.connect import writable_dir

    try:
        return writable_dir(state_dir(key), "experiment journals and locks")
    except StoreError as e:
        raise fail(str(e)) from None


def _sigterm_as_interrupt(*_):
    raise KeyboardInterrupt


def _say(prefix: str):
    from advisor import escape

    return lambda m: err.print(f"[dim]{prefix}{escape.markup(m)}[/]", highlight=False)


def run_experiment(dep, mechanism: str, value: str | None, workload, *, blocks: int, block_requests: int,
                   concurrency: int | None, readout_signal: str | None, dry_run: bool, save: bool, quiet: bool = False,
                   warmup: int = 16):
    """Shared by `experiment` and `diagnose --experiment`. Returns an ExperimentResult (or the
    plan's lines for a dry run). Raises typer.Exit on bad input."""
    from advisor.experiments import runner
    from advisor.experiments.journal import Busy, Journal, TargetLock
    from advisor.experiments.launchers import LaunchError
    from advisor.experiments.recovery import recover
    from advisor.experiments.setup import DesignError, design, launcher_for
    from advisor.knobs import KnobError

    try:
        d = design(dep, mechanism, value, workload, blocks=blocks, block_requests=block_requests,
                   concurrency=concurrency, readout_signal=readout_signal, warmup=warmup)
    except (DesignError, KnobError) as e:
        raise fail(str(e)) from None
    if dry_run:
        return d
    say = (lambda m: None) if quiet else _say("\\[experiment] ")
    directory = _state_dir_checked(dep.key)
    check_store_early(save)  # before anything starts: an unwritable store must not cost the results
    journal = Journal(directory)
    store = None
    try:
        with TargetLock(directory):
            note = recover(dep, journal, directory / "logs", say)
            if note:
                from advisor import escape

                err.print(f"[yellow]recovered:[/] {escape.markup(note)}", highlight=False)
            launcher = launcher_for(d, journal, directory / "logs")
            save_block = None
            if save:
                from advisor.store import open_store

                store = open_store(get_settings().database_url)
                exp_num = int(d.id.replace("exp-", "").replace("-", ""))

                def save_block(arm, block, run, summary):
                    return store.save_load_run(d.workload, summary, run.records, target=launcher.url(arm),
                                               model=dep.model, started_at=_utc(run.started_at), wall_s=run.wall_s,
                                               manifest={"experiment": d.id}, experiment_id=exp_num, arm=arm,
                                               block=block)
            # The entry point's handler (advisor.interrupts) shields the restore; without it (an
            # in-process caller), SIGTERM is at least an interrupt, so the baseline is restored.
            fallback = signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None)
            previous = signal.signal(signal.SIGTERM, _sigterm_as_interrupt) if fallback else None
            try:
                result = runner.execute(d, launcher, journal, say, save_block)
            finally:
                if fallback:
                    signal.signal(signal.SIGTERM, previous)
    except (Busy, LaunchError, runner.NotStarted) as e:
        raise fail(str(e)) from None
    finally:
        if store:
            store.close()
    from advisor.experiments.manifest import experiment_manifest

    result.manifest = experiment_manifest(d, result)
    return result


def _utc(ts: float):
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ts, tz=timezone.utc)


@app.command()
def experiment(
    deployment: Deployment,
    mechanism: Annotated[str, typer.Option("--mechanism", help="The one knob to change: max_num_seqs, max_num_batched_tokens, chunked_prefill, prefix_caching, kv_cache_dtype, quantization, speculative, tensor_parallel, data_parallel, replicas, gpu_memory_utilization, scheduling_policy, enforce_eager.")],
    value: Annotated[Optional[str], typer.Option("--value", help="The candidate's value (JSON or text: 8, true, fp8, '{\"method\": \"ngram\"}'). Default: flip a switch, quadruple a limit.")] = None,
    workload_file: Annotated[Optional[Path], typer.Option("--workload", help="Workload YAML replayed on both arms. Default: one suited to the mechanism.")] = None,
    from_prom: Annotated[Optional[str], typer.Option("--from-prom", help="Build the workload from the deployment's own telemetry in this Prometheus.")] = None,
    blocks: Annotated[int, typer.Option("--blocks", min=2, help="Blocks per arm (interleaved A B B A ...), at least 2; the block is the unit of replication. Medians need 4 for a 95% verdict.")] = 4,
    block_requests: Annotated[int, typer.Option("--block-requests", min=1, help="Requests per block (default workload), at least 1.")] = 32,
    concurrency: Annotated[int | None, typer.Option(
        "--concurrency", min=1, help="Requests in flight with the default workload: 8, or for max_num_seqs the "
                              "candidate's slot count, so that only the baseline queues.")] = None,
    warmup: Annotated[int, typer.Option("--warmup", min=0, help="Requests sent to each arm before its first block, not measured (0 for none).")] = 16,
    readout_signal: Annotated[Optional[str], typer.Option("--readout", help="Primary readout as a signal name (ttft_p95, tpot_p95, e2e_p99...). Default: the mechanism's.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan (both arms' argv, workload, blocks, guardrails) and touch nothing.")] = False,
    save: Annotated[bool, typer.Option("--save/--no-save", help="Keep every block's samples in the store.")] = True,
    output: Annotated[Output, typer.Option("--output", "-o", help="text, or json with verdict, primary_metric, ratio, ci, metrics and manifest.")] = Output.text,
) -> None:
    """Run baseline against a candidate that changes exactly one mechanism, on the same workload, and judge it.

    The baseline is restored and verified healthy on success, failure, abort and interrupt (a second
    Ctrl-C waits for the restore). Only processes the advisor started are stopped: with arms: sequential
    a port already served by a process it did not start is refused before anything starts, unless the
    deployment says local.owns_process: true (then that process may be stopped and the baseline restarted
    from the spec); arms: parallel never stops the baseline.
    Exit codes: 0 finished (any verdict), 1 aborted (guardrail or interrupt), 2 could not start (bad input).
    """
    from advisor.experiments.deployment import DeploymentError, load_deployment
    from advisor.workload.spec import WorkloadError, load_workload

    try:
        dep = load_deployment(deployment)
        if workload_file and from_prom:
            raise fail("give at most one of --workload and --from-prom")
        workload = load_workload(workload_file) if workload_file else None
        if from_prom:
            from advisor import net
            from advisor.workload.telemetry import workload_from_prometheus

            prom, prom_http = net.target(from_prom, "prom", "--from-prom")  # credentials split off here
            workload = workload_from_prometheus(prom, http=prom_http)
    except (DeploymentError, WorkloadError) as e:
        raise fail(str(e)) from None
    from advisor.experiments.runner import KeyboardInterruptWithResult

    try:
        result = run_experiment(dep, mechanism, value, workload, blocks=blocks, block_requests=block_requests,
                                concurrency=concurrency, readout_signal=readout_signal, dry_run=dry_run, save=save,
                                warmup=warmup)
    except KeyboardInterruptWithResult as e:
        result = e.result
    from advisor.escape import json_text
    from advisor.experiments.design import Design
    from advisor.reports.experiment_text import render, render_plan

    if isinstance(result, Design):
        if output is Output.json:
            print(json_text({"dry_run": True, "plan": result.describe(), "baseline_argv": result.baseline_args,
                             "candidate_argv": result.candidate_args}))
        else:
            render_plan(result, out)
        raise typer.Exit(EXIT_OK)
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
    it (local.owns_process), and nothing that was not serving when the experiment began. Prints what it did.

    Exit codes: 0 restored or nothing to do, 2 could not restore.
    """
    from advisor.experiments.deployment import DeploymentError, load_deployment
    from advisor.experiments.journal import Busy, Journal, TargetLock
    from advisor.experiments.launchers import LaunchError
    from advisor.experiments.recovery import recover as do_recover

    try:
        dep = load_deployment(deployment)
        directory = _state_dir_checked(dep.key)
        with TargetLock(directory):
            note = do_recover(dep, Journal(directory), directory / "logs", _say(""))
    except (DeploymentError, Busy, LaunchError) as e:
        raise fail(str(e)) from None
    out.print(note or "nothing to recover: the last experiment on this target finished cleanly", markup=False,
              highlight=False)
