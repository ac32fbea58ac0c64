"""Closing the loop: the top ranked checks of a diagnosis, each proved or refuted by its experiment."""

from __future__ import annotations

from advisor.diagnosis.model import Diagnosis


def verify_top_checks(diag: Diagnosis, dep, n: int, say) -> None:
    """Runs the experiments of the top n checks that can be tested here (not held back, not already
    in the candidate state, supported by the engine); the others get the reason in `verdict`."""
    import typer

    from advisor.cli.experiment import run_experiment
    from advisor.experiments.runner import KeyboardInterruptWithResult
    from advisor.experiments.setup import DesignError, design
    from advisor.knobs import KnobError

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
            result = run_experiment(dep, check.mechanism, None, None, blocks=4, block_requests=32, concurrency=8,
                                    readout_signal=check.readout, dry_run=False, save=True)
        except KeyboardInterruptWithResult as e:
            result = e.result
        except typer.Exit:
            check.verdict = {"skipped": "the experiment could not start (see the error above)"}
            continue
        check.verdict = {"verdict": result.verdict, "primary_metric": result.primary_metric,
                         "ratio": result.ratio, "ci": list(result.ci) if result.ci else None,
                         "value": result.value, "experiment": result.id, "status": result.status,
                         "baseline_restored": result.baseline_restored, "manifest": result.manifest,
                         "metrics": [m.model_dump(mode="json") for m in result.metrics]}
        done += 1
