"""CPU placement for an engine on a small CPU-only host.

vLLM's CPU backend pins its worker's OpenMP threads to all cores but one and leaves the other
processes unpinned. While it decodes, the engine-core process busy-polls the worker and takes the
remaining core, so the API server gets no CPU for the length of a decode: tokens reach clients in
bursts, requests reach the engine late, and client TTFT reads seconds against an engine TTFT of
milliseconds (measured on 2 cores). Putting the engine core beside the worker leaves the free cores
to the API server and to whatever drives load. Engines that pin nothing are left alone.
"""

from __future__ import annotations

import os

import psutil


def _pin_threads(pid: int, cpus: set[int]) -> None:
    # Affinity is per thread; a process's threads keep theirs when the main thread's changes.
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:  # the thread ended meanwhile
            pass


def isolate_engine_core(api_pid: int) -> str | None:
    """Move the unpinned processes under the API server `api_pid` onto its pinned worker's cores,
    and the API server onto the rest. Returns what moved, or None where nothing applies (no pinned
    worker, a worker on every core, the process gone)."""
    try:
        api = psutil.Process(api_pid)
        procs = [api, *api.children(recursive=True)]
        affinity = {p.pid: set(p.cpu_affinity()) for p in procs}
    except (psutil.Error, OSError):
        return None
    everything = set(range(psutil.cpu_count() or 1))
    pinned = set().union(*(cpus for pid, cpus in affinity.items() if pid != api_pid and cpus != everything))
    free = everything - pinned
    if not pinned or not free:
        return None
    moved = []
    for p in procs:
        if affinity[p.pid] != everything:
            continue
        cpus = free if p.pid == api_pid else pinned
        try:
            _pin_threads(p.pid, cpus)
        except OSError:  # the process ended meanwhile
            continue
        moved.append(p.pid)
    return (f"engine core beside its worker on CPU {_cpus(pinned)}, API server on CPU {_cpus(free)}"
            if moved else None)


def _cpus(cpus: set[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))
