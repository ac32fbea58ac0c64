"""Starting and stopping the processes the advisor runs: engines (the local launcher, the demo
stack), the demo's Prometheus, and child advisors (a diagnosis or an experiment run for the
dashboard). One way each: `spawn` starts one detached, with a private log; `stop` ends one (SIGTERM,
a wait, then SIGKILL).

A child advisor restores a baseline when told to stop (SIGTERM is the advisor's interrupt: an
experiment stops its candidate, restores the baseline, then exits), so `stop_restoring` waits up to
a restore's budget, and kills only past it (its journal then lets `advisor recover` finish the job);
a Ctrl-C of ours meanwhile does not cut that wait short.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import psutil

from advisor import child_env

# An interrupted experiment restores its baseline first: give it the time.
RESTORE_WAIT_S = 300.0
_POLL_S = 0.1


def _quiet(_: str) -> None:
    return None


def spawn(argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None) -> subprocess.Popen:
    """Start argv detached: its own session (so its process group is its and its helpers' only, and
    a restored baseline outlives the advisor), stdin closed, stdout and stderr into a new log only
    its owner can read. env: the whole environment (child_env.for_child builds it); None: for_child()."""
    with child_env.private_log(log_path) as log:
        return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=dict(env) if env is not None else child_env.for_child(), start_new_session=True)


def leads_group(pid: int, *, session: bool = False) -> bool:
    """Whether pid leads its process group (and, with `session`, the session it was started to lead)."""
    try:
        return os.getpgid(pid) == pid and (not session or os.getsid(pid) == pid)
    except ProcessLookupError:
        return False


def ended(proc: subprocess.Popen | psutil.Process) -> bool:
    """Whether the process has ended: a child of ours is reaped; another's counts as ended once it is
    a zombie (it stays one until its own parent reaps it)."""
    if isinstance(proc, subprocess.Popen):
        return proc.poll() is not None
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait(proc: subprocess.Popen | psutil.Process, seconds: float, patient: str | None,
          say: Callable[[str], None]) -> bool:
    deadline = time.monotonic() + seconds
    while not ended(proc):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        try:
            time.sleep(min(_POLL_S, left))
        except (KeyboardInterrupt, SystemExit):  # SystemExit: a SIGTERM handler of ours
            if patient is None:
                raise
            say(patient)
    return True


def stop(proc: subprocess.Popen | psutil.Process, grace: float, *, group: bool = False, kill_wait: float = 10.0,
         group_wait: float = 0.0, patient: str | None = None, say: Callable[[str], None] = _quiet,
         what: str = "the process") -> bool:
    """SIGTERM, up to `grace` seconds for it to end, then SIGKILL and up to `kill_wait` more (math.inf:
    until it ends). True when it has ended.

    group: signal its process group, for a process started as a session's leader (spawn) that still
    leads it: its group is it and its helpers (an engine's workers, load-generator workers) only.
    The caller decides that (leads_group), as only it knows whether the group is one it made.
    group_wait: after the leader has ended, up to this long for the rest of its group to end before
    they are killed (vLLM's API server can exit before its engine core). For a child of ours only:
    a zombie of another's stays in the group. patient: what to say when an interrupt arrives during
    the waits, which then go on (a child restoring its baseline); None: the interrupt is raised.
    PermissionError where the process is another user's."""
    pid = proc.pid

    def send(sig: int) -> None:
        try:
            # Sent only while it is unreaped (not ended), so the pid cannot have been reused.
            if group:
                os.killpg(pid, sig)
            else:
                proc.send_signal(sig)
        except (ProcessLookupError, psutil.NoSuchProcess):  # it ended meanwhile
            pass
        except psutil.AccessDenied:
            raise PermissionError(f"not permitted to signal pid {pid}") from None

    if ended(proc):
        return True  # and its group is not swept: its id may have been handed out again since
    send(signal.SIGTERM)
    if not _wait(proc, grace, patient, say):
        say(f"{what} did not stop within {grace:g} s; killing it")
        send(signal.SIGKILL)
        if not _wait(proc, kill_wait, patient, say):
            return False
    if group and group_wait > 0:
        _sweep_group(pid, group_wait)
    return True


def _sweep_group(pgid: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            os.killpg(pgid, 0)
            time.sleep(_POLL_S)
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:  # the group is empty
        pass


def stop_pid(pid: int, grace: float = 20.0) -> bool:
    """Stop whatever runs at pid, unchecked, with its group where it leads one: for tests and tools
    cleaning up their own processes. An experiment stops only the processes it recorded
    (advisor/experiments/arms/protocol.py stop_recorded)."""
    try:
        proc = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return True
    return stop(proc, grace, group=leads_group(pid), kill_wait=10)


def stop_restoring(proc: subprocess.Popen, *, wait_s: float = RESTORE_WAIT_S, group: bool = False,
                   say: Callable[[str], None] = _quiet, what: str = "the child") -> None:
    """Stop a child advisor that restores a baseline when told to stop: SIGTERM, wait up to `wait_s`
    (an interrupt meanwhile does not cut it short), then SIGKILL. group: signal the child's process
    group, for a child started with start_new_session=True (its group is the one it made: it and its
    helpers, such as load-generator workers, and nothing of ours)."""
    stop(proc, wait_s, group=group, kill_wait=math.inf, patient="still restoring the baseline; waiting for it",
         say=say, what=what)
