"""Signals and budgets for a command.

SIGINT and SIGTERM are acknowledged at once with one line on stderr, then raised as
KeyboardInterrupt in the main thread: a blocked socket read or thread join returns EINTR, so the
handler runs within a second wherever the command is. Inside `shielded()` (an experiment restoring
its baseline) a signal is acknowledged and deferred, never raised, so a second Ctrl-C cannot leave a
deployment half-restored. A `budget()` is the command's stated limit: when it runs out the main
thread gets the same interrupt, and the command ends with the budget named.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_shield_depth = 0
_deferred: list[int] = []
_budget_hit: str | None = None
_received: str | None = None
_say: Callable[[str], None] = lambda line: (sys.stderr.write(line + "\n"), sys.stderr.flush())


def _handler(signum: int, frame) -> None:
    global _received
    name = signal.Signals(signum).name
    _received = _received or name
    if _shield_depth:
        _deferred.append(signum)
        _say(f"{name} received: finishing the restore first, then stopping")
        return
    if _budget_hit is None:
        _say(f"{name} received: stopping")
    raise KeyboardInterrupt(name)


def install(say: Callable[[str], None] | None = None) -> None:
    """Called once by the command line's entry point, from the main thread."""
    global _say
    if say:
        _say = say
    signal.signal(signal.SIGINT, _handler)
    signal.signal(signal.SIGTERM, _handler)


@contextmanager
def shielded() -> Iterator[None]:
    """Signals are deferred until the block ends, then raised as KeyboardInterrupt."""
    global _shield_depth
    with _lock:
        _shield_depth += 1
    try:
        yield
    finally:
        with _lock:
            _shield_depth -= 1
            pending = _shield_depth == 0 and _deferred
            if pending:
                _deferred.clear()
        if pending and threading.current_thread() is threading.main_thread():
            raise KeyboardInterrupt("deferred")


def received() -> str | None:
    """The first signal this process was sent (SIGINT or SIGTERM), if any."""
    return _received


def budget_hit() -> str | None:
    """What ran out, when a budget interrupted the command."""
    return _budget_hit


@contextmanager
def budget(seconds: float, what: str) -> Iterator[None]:
    """Interrupt the main thread (as a signal would) once `seconds` have passed inside the block."""
    done = threading.Event()

    def watch() -> None:
        global _budget_hit
        if done.wait(seconds):
            return
        _budget_hit = f"{what} exceeded its budget of {seconds:.0f}s"
        _say(f"error: {_budget_hit}: stopping")
        try:
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        except (ProcessLookupError, RuntimeError):
            os._exit(2)

    t = threading.Thread(target=watch, name="advisor-budget", daemon=True)
    t.start()
    try:
        yield
    finally:
        done.set()
