"""The experiment use case: one entry point from a validated Design to a typed ExperimentResult.

It holds everything around the blocks (advisor/experiments/run/runner.py): the target's journal folder
and lock, the recovery of an unfinished experiment, the store that keeps every block's samples, and
SIGTERM as an interrupt where no entry point handles it, so that the baseline is restored. Every
error it raises is an advisor.errors.AdvisorError (one line, exit 2 at the command line); an
interrupt arrives as runner.KeyboardInterruptWithResult, carrying the result so far (without the
manifest, which would read the target again).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from advisor.experiments.run import capacity, runner
from advisor.experiments.design.plan import Design
from advisor.experiments.result import ExperimentResult
from advisor.settings import get_settings
from advisor.experiments.arms.journal import Journal, TargetLock
from advisor.experiments.arms.recovery import recover
from advisor.experiments.design import calibration
from advisor.experiments.design.arm_costs import arm_pricing
from advisor.experiments.design.manifest import experiment_manifest
from advisor.experiments.run.setup import launcher_for

if TYPE_CHECKING:
    from advisor.cost import Price

KeyboardInterruptWithResult = runner.KeyboardInterruptWithResult
# Set by whoever launched this process (the dashboard), stored with the experiment's row so that
# the launcher finds its row among others (advisor/app/watched.py).
LAUNCH_KEY_ENV = "ADVISOR_LAUNCH_KEY"


def state_dir(key: str) -> Path:
    return get_settings().data_dir / "experiments" / key


def checked_state_dir(key: str) -> Path:
    """The target's journal and lock folder, shown writable before anything starts (a StoreError if not)."""
    from advisor.store.connect import writable_dir

    return writable_dir(state_dir(key), "experiment journals and locks")


def _sigterm_as_interrupt(*_):
    raise KeyboardInterrupt


def _quiet(_: str) -> None:
    return None


def run(d: Design, *, save: bool = True, say: Callable[[str], None] = _quiet,
        note: Callable[[str], None] | None = None, diagnosis_id: int | None = None,
        price: Price | None = None) -> ExperimentResult:
    """Runs the experiment the Design describes on its deployment and returns its result (any
    verdict, or status "aborted" after a guardrail). `say` gets progress lines, `note` what recovery
    found (default: `say`). Raises AdvisorError subclasses when it cannot start (state folder or
    store unwritable, target busy, launcher refused, baseline or prompts failed: the target left as
    found), KeyboardInterruptWithResult on an interrupt (baseline restored first). `price`: the
    cost per output token of both arms and the candidate's ratio (advisor/cost.py)."""

    dep = d.deployment
    directory = checked_state_dir(dep.key)
    # Opened (created, migrated) before anything starts: an unwritable store must not cost the results.
    store = None
    if save:
        from advisor.store import open_store

        store = open_store(get_settings().database_url)
    try:
        journal = Journal(directory)
        with TargetLock(directory):
            found = recover(dep, journal, directory / "logs", say)
            if found:
                (note or say)(found)
            launcher = launcher_for(d, journal, directory / "logs")
            if dep.launcher == "endpoints" and not d.aa:
                launcher.notes.append(_likeness(directory, dep))
            # What the arms' cost is computed from: read before the blocks (the GPUs this host sees).
            pricing, cost_note = arm_pricing(d, price)
            save_block = None
            stored = None
            if store is not None:
                stored = store.start_experiment(d.id, dep.name, dep.target_url, d.mechanism, repr(d.value),
                                                design_document(d), journal=str(directory),
                                                diagnosis_id=diagnosis_id,
                                                launch_key=os.environ.get(LAUNCH_KEY_ENV))

                def save_block(arm, block, run, summary):
                    run_id = store.save_load_run(d.workload, summary, run.records, target=launcher.url(arm),
                                                 model=dep.model, started_at=_utc(run.started_at), wall_s=run.wall_s,
                                                 manifest={"experiment": d.id}, experiment_id=stored, arm=arm,
                                                 block=block)
                    store.touch_experiment(stored)
                    return run_id
            # The entry point's handler (advisor.interrupts) shields the restore; without it (an
            # in-process caller), SIGTERM is at least an interrupt, so the baseline is restored.
            fallback = (threading.current_thread() is threading.main_thread()
                        and signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None))
            previous = signal.signal(signal.SIGTERM, _sigterm_as_interrupt) if fallback else None
            try:
                if d.capacity is not None:
                    result = capacity.execute(d, launcher, journal, say)
                else:
                    result = runner.execute(d, launcher, journal, say, save_block, pricing=pricing,
                                            cost_note=cost_note)
            except runner.KeyboardInterruptWithResult as e:
                so_far = e.result
                _quietly(lambda: store.finish_experiment(stored, so_far, status="interrupted"), stored)
                raise
            except BaseException as e:
                why = f"{type(e).__name__}: {e}"
                _quietly(lambda: store.fail_experiment(stored, why), stored)
                raise
            finally:
                if fallback:
                    signal.signal(signal.SIGTERM, previous)
        try:
            if d.aa and result.status == "finished" and d.capacity is None:
                from advisor.experiments.design import calibration

                cal = calibration.measure(d.id, dep.name, d.workload.name, len(d.requests), result._by_block)
                if dep.launcher == "endpoints":
                    from probes.http import redact_url

                    cal.apart = calibration.Apart(baseline=redact_url(dep.endpoints.baseline.rstrip("/")),
                                                  candidate=redact_url(dep.endpoints.candidate.rstrip("/")),
                                                  readout=result.primary_metric, ratio=result.ratio,
                                                  ci=tuple(result.ci) if result.ci else None, verdict=result.verdict)
                calibration.save(directory, cal)
                result.calibration = cal.readouts
            result.manifest = experiment_manifest(d, result)
        except BaseException as e:
            # The blocks are done and the baseline restored: the row says so, never "running" for ever.
            ending = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
            _quietly(lambda: store.finish_experiment(stored, result, status=ending), stored)
            raise
        if stored is not None:
            store.finish_experiment(stored, result)
    finally:
        if store is not None:
            store.close()
    return result


def _likeness(directory: Path, dep) -> str:
    """The endpoints launcher compares two environments it did not start: how far apart the stored A/A
    run found them, for the report."""

    try:
        cal = calibration.load(directory)
    except calibration.CalibrationError as e:
        return str(e)
    if cal is None:
        return calibration.no_calibration_note()
    return cal.likeness(dep.endpoints.baseline, dep.endpoints.candidate)


def _quietly(write: Callable[[], None], stored: int | None) -> None:
    # The experiment's own error (or interrupt) is the news; a store that fails too must not hide it.
    if stored is None:
        return
    try:
        write()
    except Exception:  # noqa: BLE001
        pass


def design_document(d: Design) -> dict:
    """What the store keeps of a design: what a page shows before the first block ends."""
    return {"lines": d.describe(), "plan": d.plan, "blocks_per_arm": d.blocks_per_arm,
            "requests_per_block": len(d.requests), "warmup_requests": d.warmup_requests,
            "order": [f"{arm}:{b + 1}" for arm, b in d.order], "primary": list(d.primary),
            "secondary": [list(s) for s in d.secondary], "baseline_args": d.baseline_args,
            "candidate_args": d.candidate_args, "workload": d.workload.name, "aa": d.aa,
            "sequential": d.stopping.sequential, "direction": d.direction}


def stored_calibration(dep):
    """The target's A/A calibration, or None: what plans start from."""

    return calibration.load(state_dir(dep.key))


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=timezone.utc)
