"""Closing the loop: the top ranked checks of a diagnosis, each proved or refuted by its experiment."""

from __future__ import annotations

from typing import TYPE_CHECKING

from advisor.diagnosis.model import CheckSkip, Diagnosis, ExperimentRef
from advisor.errors import AdvisorError
from advisor.experiments.arms import arm_check
from advisor.experiments.arms.engine_state import EngineState, observe_url
from advisor.experiments.run import session
from advisor.experiments.run.setup import design
from advisor.workload.spec import WorkloadError
from advisor.workload.telemetry import workload_from_prometheus

if TYPE_CHECKING:
    from advisor.experiments.result import ExperimentResult

BLOCK_REQUESTS = 48  # a replayed block; the plan raises it where a tail primary needs more


def _replay_workload(diag: Diagnosis, say):
    """The deployment's own traffic shape from the Prometheus the diagnosis read, sized to a block;
    None (each mechanism's default workload) when there is no telemetry to build it from."""
    if diag.via != "prometheus":
        return None

    try:
        w = workload_from_prometheus(diag.target, window_s=diag.window_s, at=diag.taken_at)
    except WorkloadError as e:
        say(f"experiments use each mechanism's default workload: {e}")
        return None
    # model_copy, not a re-validation: the seed stays unset, so each experiment draws fresh prompts
    # (a long-running baseline would otherwise meet the previous experiment's prompts in its cache).
    return w.model_copy(update={"requests": BLOCK_REQUESTS, "duration_s": None})


def _unseen_by_replay(mechanism: str, workload) -> str | None:
    """Why the replay from Prometheus cannot test this mechanism, where it cannot: what the
    mechanism acts on is invisible in the telemetry while the baseline runs without it."""
    if mechanism == "prefix_caching" and workload is not None and workload.prefix is None:
        return ("the replay from Prometheus carries no shared prefixes: with prefix caching off the engine "
                "counts no prefix hits, so how the prompts share prefixes cannot be read from its metrics "
                "(and a replay without them would test only the cost of turning it on); give the traffic's "
                "shape with --workload (a spec with prefix:) to test it")
    return None


def verify_top_checks(diag: Diagnosis, dep, n: int, say, price=None, workload=None,
                      baseline: str = "auto", blocks: int | None = None) -> list[ExperimentResult]:
    """Runs the experiments of the top n checks that can be tested here (not held back, not already
    in the candidate state, supported by the engine); each check tested refers to its stored result
    in `verdict`, the others get the reason. Returns the results, in the order run, for the reports
    made before anything is read back from the store. `workload`: the traffic every experiment
    replays, as the user declared it; else the shape read from Prometheus. `blocks`: the most blocks
    per arm of each experiment (None: planned from the target's A/A calibration). An interrupt ends the
    loop after that experiment's restore; its result so far is kept."""

    replayed = workload is None
    if replayed:
        workload = _replay_workload(diag, say)
    state = EngineState.from_info(diag.engine) if diag.engine else None
    try:
        cal = session.stored_calibration(dep)
    except AdvisorError as e:  # the diagnosis is kept: plan from the stated default instead
        say(f"{e}; planning from the conservative default")
        cal = None
    changed = _endpoint_changes(dep, say)
    results: list[ExperimentResult] = []
    done = 0
    tried: dict[tuple[str, str | None], int] = {}  # (mechanism, direction) -> the rank that ran it
    for check in diag.checks:
        same = tried.get((check.mechanism, check.direction))
        if same is not None:  # two checks can prescribe one change (ADV002's KV checks): one experiment
            change = " ".join(x for x in (check.mechanism, check.direction) if x)
            check.verdict = CheckSkip(skipped=f"the same experiment as check #{same} ({change})")
            continue
        if changed is not None and check.mechanism not in changed:
            check.verdict = CheckSkip(skipped=f"the endpoints' candidate changes {', '.join(sorted(changed))}, "
                                              f"not {check.mechanism}")
            continue
        if done >= n:
            check.verdict = CheckSkip(skipped=f"--experiment {n} runs only the top {n} testable check{'s' if n != 1 else ''}")
            continue
        if check.held_back or check.already:
            check.verdict = CheckSkip(skipped="held back" if check.held_back else "already in the candidate state")
            continue
        unseen = _unseen_by_replay(check.mechanism, workload) if replayed else None
        if unseen:
            check.verdict = CheckSkip(skipped=unseen)
            continue
        try:
            # blocks: planned from the target's A/A calibration unless capped; requests per block: from the workload
            d = design(dep, check.mechanism, None, workload, blocks=blocks, concurrency=None,
                       readout_signal=check.readout, direction=check.direction, state=state, calibration=cal,
                       baseline=baseline)
        except AdvisorError as e:
            check.verdict = CheckSkip(skipped=str(e))
            continue
        say(f"experiment for check #{check.rank} {check.rule_id}/{check.id}: {check.mechanism}")
        try:
            result = session.run(d, save=True, say=say, price=price)
        except session.KeyboardInterruptWithResult as e:  # baseline restored: keep what it found, stop here
            check.verdict = ExperimentRef(experiment=e.result.id, verdict=e.result.verdict)
            results.append(e.result)
            say("interrupted: no further experiments")
            return results
        except AdvisorError as e:
            say(f"check #{check.rank}: the experiment could not start: {e}")
            check.verdict = CheckSkip(skipped=f"the experiment could not start: {e}")
            continue
        check.verdict = ExperimentRef(experiment=result.id, verdict=result.verdict)
        results.append(result)
        tried[(check.mechanism, check.direction)] = check.rank
        done += 1
    return results


def _endpoint_changes(dep, say) -> set[str] | None:
    """With the endpoints launcher the candidate is what it is: the knobs its revealed configuration
    changes, so that only those checks run. None where it cannot be told (the local launcher makes
    each check's own candidate; an engine that reveals nothing, or no revealed difference)."""
    if dep.launcher != "endpoints":
        return None

    base, cand = (observe_url(u, dep.engine, dep.model) for u in (dep.endpoints.baseline, dep.endpoints.candidate))
    if base.problem or cand.problem:
        return None
    changed = arm_check.changed_mechanisms(base, cand)
    if changed:
        say(f"the endpoints' candidate changes {', '.join(sorted(changed))}: only that check is run")
    return changed or None
