"""The event loop that load is driven on: uvloop where it is installed, asyncio's own otherwise;
and the objects that exist before the run are frozen out of the garbage collector's scans. Full
collections over everything imported stall the loop for milliseconds and show as scheduling lag:
freezing them took the highest rate held on one core with p99 lag <= 5 ms from 141/s to 476/s,
and uvloop from there to 673/s (5 s trials; benchmarks/README.md)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


try:
    from uvloop import run as _run
except ImportError:  # not built for this platform
    _run = asyncio.run


def run_load(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run for a load generator's coroutine."""
    gc.collect()
    gc.freeze()
    try:
        return _run(coro)
    finally:
        gc.unfreeze()
        # A Ctrl-C before the loop first ran it would leave it never awaited, and Python warns of
        # that on the user's terminal; closing a coroutine that ran is a no-op.
        coro.close()
