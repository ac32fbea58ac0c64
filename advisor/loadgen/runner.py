"""The open-loop (and closed-loop) runner. Sends are scheduled against absolute deadlines from one
start time, so sleep jitter never accumulates into drift; the lag of every send is recorded."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from advisor import net
from advisor.loadgen import client
from advisor.loadgen.record import RequestRecord
from advisor.loadgen.wire import Pool
from advisor.units import MAX_LOAD_REQUESTS
from advisor.workload.plan import PlannedRequest
from probes.http import HttpConfig

Progress = Callable[[int, int], None]


@dataclass
class Run:
    records: list[RequestRecord]
    started_at: float  # unix time of t0
    wall_s: float
    planned_span_s: float | None  # open loop: the last scheduled send time
    aborted: str | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class Target:
    url: str
    model: str
    api: str = "completions"
    extra_body: dict | None = None
    request_timeout_s: float = 300.0
    http: HttpConfig | None = None  # TLS and credentials; None: the settings' for an engine (advisor/net.py)
    # More replicas serving the same arm beside `url`: each request goes to the one with the fewest
    # requests in flight (the first, on a tie), as a least-requests router would send it.
    spread: tuple[str, ...] = ()


async def run(target: Target, requests: list[PlannedRequest], prompts: dict[int, str], *,
              concurrency: int | None = None, duration_s: float | None = None,
              progress: Progress | None = None, should_abort: Callable[[], str | None] | None = None,
              max_in_flight: int = 1024, start_at: float | None = None,
              on_done: Callable[[RequestRecord], None] | None = None) -> Run:
    """Send `requests` (open loop by their at_s, or closed loop with `concurrency` slots).

    start_at: the unix time of the schedule's origin (default: once the clients exist), so that
    several processes can keep one arrival process (advisor/loadgen/workers.py); on_done: called
    with each record as its request ends."""
    urls = [u.rstrip("/") for u in (target.url, *target.spread)]
    records = [RequestRecord(r.index, r.bucket, r.prompt_tokens, r.output_tokens, r.at_s,
                             prefix_group=r.prefix_group, priority=r.priority) for r in requests]
    done = 0
    aborted: str | None = None
    notes: list[str] = []

    async def one(req: PlannedRequest, rec: RequestRecord) -> None:
        nonlocal done
        payload = client.body(target.api, target.model, prompts[req.index], req.output_tokens, target.extra_body,
                              priority=req.priority)
        k = min(range(len(pools)), key=lambda i: in_flight[i])
        in_flight[k] += 1
        if len(pools) > 1:
            rec.replica = k
        try:
            await client.send(pools[k], target.api, payload, rec, t0, req.cancel_after_tokens,
                              target.request_timeout_s)
        finally:
            in_flight[k] -= 1
        done += 1
        if on_done:
            on_done(rec)
        if progress:
            progress(done, len(requests))

    def over() -> bool:
        nonlocal aborted
        if aborted is None and should_abort is not None:
            aborted = should_abort()
        return aborted is not None or (duration_s is not None and time.perf_counter() - t0 >= duration_s)

    # TLS settings and credentials only: the per-request deadline is client.send's own.
    pools = [Pool(u, target.http or net.config("engine", url=u)) for u in urls]
    in_flight = [0] * len(pools)
    try:
        if start_at is None:
            started_at, t0 = time.time(), time.perf_counter()
        else:  # the same origin in every process: perf_counter's offset to the wall clock is read once here
            started_at, t0 = start_at, time.perf_counter() + (start_at - time.time())
            if t0 > time.perf_counter():
                await asyncio.sleep(t0 - time.perf_counter())
        if concurrency:
            queue = iter(zip(requests, records))

            async def worker() -> None:
                for req, rec in queue:
                    if over():
                        return
                    rec.scheduled_s = time.perf_counter() - t0
                    await one(req, rec)

            await asyncio.gather(*(worker() for _ in range(concurrency)))
            if duration_s is not None and aborted is None and time.perf_counter() - t0 < duration_s:
                notes.append(f"the closed loop sent all {len(requests):,} planned requests before its "
                             f"{duration_s:g}s were up (one load plans at most {MAX_LOAD_REQUESTS:,})")
        else:
            tasks: set[asyncio.Task] = set()
            sem = asyncio.Semaphore(max_in_flight)
            for req, rec in zip(requests, records):
                delay = t0 + req.at_s - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                if over():
                    break
                await sem.acquire()
                task = asyncio.create_task(one(req, rec))
                tasks.add(task)
                task.add_done_callback(lambda t: (tasks.discard(t), sem.release()))
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        for pool in pools:
            pool.close()
    wall = time.perf_counter() - t0
    span = None if concurrency else max((r.at_s for r in requests if r.at_s is not None), default=0.0)
    return Run(records=records, started_at=started_at, wall_s=wall, planned_span_s=span, aborted=aborted, notes=notes)
