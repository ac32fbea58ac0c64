"""Whether the load generator can keep the plan's schedule on this host now, tried before any arm
starts.

A block whose sends fell behind their schedule is not judged (runner.py), so a schedule the
generator cannot keep here (a host busy with other work, the engines included, or a rate beyond one
process) would spend a whole experiment on blocks that are thrown away. The trial replays the first
seconds of a block's schedule on the same event loop the blocks use (advisor/loadgen/loop.py),
with each send doing the generator's own work for a request up to the socket (its body built and
encoded) and nothing sent, and measures how late each send fires. It shows what starves the loop
(the host's CPU taken by others, the generator's per-request work); it cannot show what a real
connection costs, which each block's own lag check still does. Closed-loop workloads (a number of
requests in flight, no schedule) have nothing to fall behind and are not tried.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

from advisor.loadgen import client
from advisor.loadgen.loop import run_load
from advisor.loadgen.metrics import MAX_LAG_P99_S
from advisor.workload.plan import PlannedRequest
import psutil

TRIAL_S = 3.0  # seconds of schedule tried: a few hundred sends at the rates a CPU engine takes
PROMPT_WORDS = 512  # a prompt's worth of text for each body built


class CpuMeter:
    """Between start and stop: the host's CPU busy share, this process's own CPU (the load
    generator's) as a share of one core, and the share of the time its event loop's thread was
    ready to run but waited for a CPU (the kernel's run-queue delay, /proc/self/schedstat): what
    tells a generator starved by others from one saturated by its own work. None where unknown."""

    def __init__(self):
        self._psutil, self._me = psutil, psutil.Process()
        self._host, self._own, self._wait = psutil.cpu_times(), self._me.cpu_times(), _run_delay_s()
        self._t = time.monotonic()

    def stop(self) -> tuple[float | None, float | None, float | None]:
        host, own, wait = self._psutil.cpu_times(), self._me.cpu_times(), _run_delay_s()
        wall = time.monotonic() - self._t
        total = sum(host) - sum(self._host)
        idle = (host.idle - self._host.idle) + (getattr(host, "iowait", 0) - getattr(self._host, "iowait", 0))
        busy = None if total <= 0 else min(1.0, max(0.0, 1 - idle / total))
        used = (own.user + own.system) - (self._own.user + self._own.system)
        if wall <= 0:
            return busy, None, None
        waited = None if wait is None or self._wait is None else min(1.0, max(0.0, (wait - self._wait) / wall))
        return busy, max(0.0, used / wall), waited


def _run_delay_s() -> float | None:
    """Seconds the calling thread has spent runnable but not running (Linux's schedstat); None
    elsewhere."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class Pacing:
    sends: int
    rate: float  # sends per second tried
    lag_p99_s: float
    host_cpu_busy: float | None
    generator_cpu: float | None
    generator_waited: float | None = None

    @property
    def kept(self) -> bool:
        return self.lag_p99_s <= MAX_LAG_P99_S

    def refusal(self) -> str:
        busy = (f"; this host's CPUs were {self.host_cpu_busy:.0%} busy and the generator used "
                f"{self.generator_cpu:.0%} of a core" if self.host_cpu_busy is not None and self.generator_cpu is not None
                else "")
        if self.generator_waited is not None:
            busy += f", waiting for a CPU {self.generator_waited:.0%} of the time"
        return (f"the load generator cannot keep this schedule on this host now: a trial of its first {TRIAL_S:g} s "
                f"({self.sends} sends at {self.rate:.1f}/s, nothing sent) fired them {self.lag_p99_s * 1000:.0f} ms "
                f"late at p99, beyond the {MAX_LAG_P99_S * 1000:.0f} ms a block may lag{busy}. Every block would be "
                "thrown away: run the advisor where its CPU is not taken (another host, or while this one is quieter), "
                "or lower the workload's rate")


def check(requests: list[PlannedRequest], api: str, model: str) -> Pacing | None:
    """The trial, tried again once when it lags (a moment's stall is not a busy host); the last
    Pacing, or None for a closed-loop workload."""
    first = trial(requests, api, model)
    return first if first is None or first.kept else trial(requests, api, model)


def trial(requests: list[PlannedRequest], api: str = "completions", model: str = "m") -> Pacing | None:
    """The trial over the schedule's first TRIAL_S seconds; None for a closed-loop workload."""
    timed = [r for r in requests if r.at_s is not None and r.at_s <= TRIAL_S]
    if len(timed) < 2:
        return None
    prompt = " ".join(["word"] * PROMPT_WORDS)
    meter = CpuMeter()
    lags = run_load(_fire(timed, api, model, prompt))
    host, own, waited = meter.stop()
    lags.sort()
    p99 = lags[min(len(lags) - 1, int(0.99 * len(lags)))]
    span = max(r.at_s for r in timed) - min(r.at_s for r in timed)
    return Pacing(sends=len(timed), rate=(len(timed) - 1) / span if span > 0 else float(len(timed)),
                  lag_p99_s=p99, host_cpu_busy=host, generator_cpu=own, generator_waited=waited)


async def _fire(timed: list[PlannedRequest], api: str, model: str, prompt: str) -> list[float]:
    lags: list[float] = []
    tasks: set[asyncio.Task] = set()

    async def send(req: PlannedRequest) -> None:
        payload = client.body(api, model, prompt, req.output_tokens, priority=req.priority)
        json.dumps(payload).encode()
        await asyncio.sleep(0)

    t0 = time.perf_counter()
    for req in timed:
        delay = t0 + req.at_s - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        lags.append(max(0.0, time.perf_counter() - (t0 + req.at_s)))
        task = asyncio.create_task(send(req))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks)
    return lags
