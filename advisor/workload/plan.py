"""The request set a workload produces: deterministic for a seed, so both arms of an experiment
replay exactly the same requests."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

from advisor.units import MAX_LOAD_REQUESTS
from advisor.workload.spec import Workload, WorkloadError, check_ceilings


@dataclass(frozen=True)
class PlannedRequest:
    index: int
    at_s: float | None  # send time from the run's start; None in closed loop (as soon as a slot frees)
    bucket: str
    prompt_tokens: int
    output_tokens: int
    prefix_group: int | None  # which shared prefix it starts with, if any
    cancel_after_tokens: int | None
    priority: int | None = None  # sent as the request's priority field (Bucket.priority)


def gaps(w: Workload, rng: random.Random):
    """Arrival gaps of the workload's open-loop process (its kind, rate and burstiness), drawn from rng."""
    a = w.arrival
    if a.kind == "constant":
        while True:
            yield 1.0 / a.rate
    elif a.kind == "poisson":
        while True:
            yield rng.expovariate(a.rate)
    elif a.kind == "gamma":
        # Shape k = burstiness, mean 1/rate: CV^2 = 1/k, so k < 1 is burstier than Poisson.
        k = a.burstiness
        while True:
            yield rng.gammavariate(k, 1.0 / (a.rate * k))


def schedule(w: Workload) -> Iterator[PlannedRequest]:
    """The workload's requests in send order, drawn as they are asked for: the first is there at
    once and memory does not grow with the schedule's length, whatever the rate and duration.
    Deterministic for a seed (the same draws in the same order as ever)."""
    rng = random.Random(w.seed)
    weights = [b.weight for b in w.buckets]
    limit = w.requests if w.requests is not None else math.inf
    closed = w.arrival.kind == "concurrency"
    if closed and w.requests is None:
        # Enough requests for the duration at a generous per-slot rate; the runner stops at the
        # deadline. Never more than one load plans: a closed loop that sends them all ends early.
        limit = min(int(w.duration_s * w.arrival.concurrency * 20) + w.arrival.concurrency, MAX_LOAD_REQUESTS)
    arrivals = None if closed else gaps(w, rng)
    n = 0
    t = 0.0
    while n < limit:
        at = None
        if arrivals is not None:
            t += next(arrivals) if n else 0.0
            if w.duration_s is not None and t >= w.duration_s:
                return
            at = t
        b = rng.choices(w.buckets, weights)[0]
        p = rng.randint(*b.prompt_tokens)
        o = rng.randint(*b.output_tokens)
        group = None
        if w.prefix and rng.random() < w.prefix.share and p > w.prefix.tokens:
            group = rng.randrange(w.prefix.groups)
        cancel = None
        if w.cancellation.rate and rng.random() < w.cancellation.rate:
            cancel = min(o, rng.randint(*w.cancellation.after_tokens))
        yield PlannedRequest(n, at, b.label, p, o, group, cancel, b.priority)
        n += 1


def plan(w: Workload, limit: int = MAX_LOAD_REQUESTS) -> list[PlannedRequest]:
    """The whole schedule, for the callers that need it at once (prompt sizing, an experiment's
    blocks, workers dealt round-robin): checked against the ceilings first, and never more than
    `limit` requests held (past it, one line instead of a schedule larger than memory)."""
    check_ceilings(w)
    out = list(itertools.islice(schedule(w), limit + 1))
    if len(out) > limit:
        raise WorkloadError(f"the workload plans more than {limit:,} requests, the ceiling on one load; "
                            "lower the rate, shorten the duration or give requests")
    return out


def planned_count(w: Workload) -> int:
    """How many requests plan(w) holds, counted without holding them."""
    check_ceilings(w)
    return sum(1 for _ in itertools.islice(schedule(w), MAX_LOAD_REQUESTS + 1))
