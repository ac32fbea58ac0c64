"""Closing the loop: the top ranked checks of a diagnosis, each proved or refuted by its experiment."""

from __future__ import annotations

from advisor.diagnosis.model import Diagnosis


BLOCK_REQUESTS = 48
BLOCKS_PER_ARM = 6  # blocks replaying telemetry are short: more of them buy power cheaply


def _replay_workload(diag: Diagnosis, say):
    """The deployment's own traffic shape from the Prometheus the diagnosis read, sized to a block;
    None (each mechanism's default workload) when there is no telemetry to build it from."""
    if diag.via != "prometheus":
        return None
    from advisor.workload.spec import Workload, WorkloadError
    from advisor.workload.telemetry import workload_from_prometheus

    try:
        w = workload_from_prometheus(diag.target, window_s=diag.window_s, at=diag.taken_at)
    except WorkloadError as e:
        say(f"experiments use each mechanism's default workload: {e}")
        return None
    return Workload.model_validate({**w.model_dump(), "requests": BLOCK_REQUESTS, "duration_s": None})


def verify_top_checks(diag: Diagnosis, dep, n: int, say) -> None:
    """Runs the experiments of the top n checks that can be tested here (not held back, not already
    in the candidate state, supported by the engine); the others get the reason in `verdict`."""
    import typer

    from advisor.cli.experiment import run_experiment
    from advisor.experiments.runner import KeyboardInterruptWithResult
    from advisor.experiments.setup import DesignError, design
    from advisor.knobs import KnobError

    workload = _replay_workload(diag, say)
    done = 0
    for check in diag.checks:
        if done >= n:
            break
        if check.held_back or check.already:
            check.verdict = {"skipped": "held back" if check.held_back else "already in the candidate state"}
            continue
        try:
            design(dep, check.mechanism, None, None, readout_signal=check.readout)
        except (DesignError, KnobError) as e:
            check.verdict = {"skipped": str(e)}
            continue
        say(f"experiment for check #{check.rank} {check.rule_id}/{check.id}: {check.mechanism}")
        try:
            result = run_experiment(dep, check.mechanism, None, workload, blocks=BLOCKS_PER_ARM, block_requests=BLOCK_REQUESTS,
                                    concurrency=None, readout_signal=check.readout, dry_run=False, save=True)
        except KeyboardInterruptWithResult as e:
            result = e.result
        except typer.Exit:
            check.verdict = {"skipped": "the experiment could not start (see the error above)"}
            continue
        check.verdict = {"verdict": result.verdict, "primary_metric": result.primary_metric,
                         "ratio": result.ratio, "ci": list(result.ci) if result.ci else None,
                         "value": result.value, "experiment": result.id, "status": result.status,
                         "fails_means": result.fails_means, "workload": result.manifest.get("workload", {}).get("source"),
                         "baseline_restored": result.baseline_restored, "manifest": result.manifest,
                         "metrics": [m.model_dump(mode="json") for m in result.metrics]}
        done += 1
