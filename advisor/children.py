"""Stopping a child advisor (a diagnosis or an experiment) that restores a baseline when told to stop.

SIGTERM is the advisor's interrupt: an experiment stops its candidate, restores the baseline, then
exits. So the child is waited for, up to a restore's budget, and killed only past it (its journal
then lets `advisor recover` finish the job). A Ctrl-C of ours meanwhile does not cut the wait short.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable

# An interrupted experiment restores its baseline first: give it the time.
RESTORE_WAIT_S = 300.0


def _quiet(_: str) -> None:
    return None


def stop_restoring(proc: subprocess.Popen, *, wait_s: float = RESTORE_WAIT_S, group: bool = False,
                   say: Callable[[str], None] = _quiet, what: str = "the child") -> None:
    """SIGTERM, wait up to `wait_s`, then SIGKILL. group: signal the child's process group, for a
    child started with start_new_session=True (its group is the one it made: it and its helpers,
    such as load-generator workers, and nothing of ours)."""

    def send(sig: int) -> None:
        try:
            if group:
                # The child leads its own session (start_new_session), so its pid is its group's id:
                # the group holds it and its helpers only. Sent only while it is unreaped (poll()
                # is None), so the id cannot have been reused.
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)
        except ProcessLookupError:  # it ended meanwhile
            pass

    if proc.poll() is None:
        send(signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            break
        except (KeyboardInterrupt, SystemExit):  # SystemExit: a SIGTERM handler of ours
            say("still restoring the baseline; waiting for it")
    if proc.poll() is None:
        say(f"{what} did not finish within {wait_s:g} s of the stop; killing it")
        send(signal.SIGKILL)
        proc.wait()
