"""The experiment use case: one entry point from a validated Design to a typed ExperimentResult.

It holds everything around the blocks (advisor/experiments/runner.py): the target's journal folder
and lock, the recovery of an unfinished experiment, the store that keeps every block's samples, and
SIGTERM as an interrupt where no entry point handles it, so that the baseline is restored. Every
error it raises is an advisor.errors.AdvisorError (one line, exit 2 at the command line); an
interrupt arrives as runner.KeyboardInterruptWithResult, carrying the result so far (without the
manifest, which would read the target again).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from advisor.experiments import runner
from advisor.experiments.design import Design
from advisor.experiments.result import ExperimentResult
from advisor.settings import get_settings

KeyboardInterruptWithResult = runner.KeyboardInterruptWithResult


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
        note: Callable[[str], None] | None = None) -> ExperimentResult:
    """Runs the experiment the Design describes on its deployment and returns its result (any
    verdict, or status "aborted" after a guardrail). `say` gets progress lines, `note` what recovery
    found (default: `say`). Raises AdvisorError subclasses when it cannot start (state folder or
    store unwritable, target busy, launcher refused, baseline or prompts failed: the target left as
    found), KeyboardInterruptWithResult on an interrupt (baseline restored first)."""
    from advisor.experiments.journal import Journal, TargetLock
    from advisor.experiments.manifest import experiment_manifest
    from advisor.experiments.recovery import recover
    from advisor.experiments.setup import launcher_for

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
            save_block = None
            if store is not None:
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
    finally:
        if store is not None:
            store.close()
    if d.aa and result.status == "finished":
        from advisor.experiments import calibration

        cal = calibration.measure(d.id, dep.name, d.workload.name, len(d.requests), result._by_block)
        calibration.save(directory, cal)
        result.calibration = cal.readouts
    result.manifest = experiment_manifest(d, result)
    return result


def stored_calibration(dep):
    """The target's A/A calibration, or None: what plans start from."""
    from advisor.experiments import calibration

    return calibration.load(state_dir(dep.key))


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=timezone.utc)
