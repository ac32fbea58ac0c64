"""The request set a workload produces: deterministic for a seed, so both arms of an experiment
replay exactly the same requests."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from advisor.workload.spec import Workload


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


def _gaps(w: Workload, rng: random.Random):
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


def plan(w: Workload) -> list[PlannedRequest]:
    rng = random.Random(w.seed)
    weights = [b.weight for b in w.buckets]
    limit = w.requests if w.requests is not None else math.inf
    closed = w.arrival.kind == "concurrency"
    if closed and w.requests is None:
        # Enough requests for the duration at a generous per-slot rate; the runner stops at the deadline.
        limit = int(w.duration_s * w.arrival.concurrency * 20) + w.arrival.concurrency
    gaps = None if closed else _gaps(w, rng)
    out: list[PlannedRequest] = []
    t = 0.0
    while len(out) < limit:
        at = None
        if gaps is not None:
            t += next(gaps) if out else 0.0
            if w.duration_s is not None and t >= w.duration_s:
                break
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
        out.append(PlannedRequest(len(out), at, b.label, p, o, group, cancel, b.priority))
    return out
