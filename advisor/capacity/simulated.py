"""A simulated deployment for the search's calibration (tests/unit/test_capacity_search.py and
test_capacity_experiment.py): an engine of `slots` concurrent requests in front of a FIFO queue,
Poisson arrivals, lognormal service times; a request's time to first token is its wait for a slot
plus its prefill (a fixed share of its service). Its true capacity at an objective is read from one
long run per rate."""

from __future__ import annotations

import heapq
import math
import random

from advisor.capacity.search import Objective, TrialResult, tally


class Queue:
    def __init__(self, slots: int = 4, mean_service_s: float = 1.0, sigma: float = 0.5, prefill_share: float = 0.1):
        self.slots, self.mean, self.sigma, self.prefill = slots, mean_service_s, sigma, prefill_share

    def draws(self, n: int, rng: random.Random) -> list[tuple[float, float]]:
        """Per request, (its gap to the one before at rate 1, its service time). expovariate(rate) is
        expovariate(1) / rate to the bit, so one draw serves every rate."""
        mu = math.log(self.mean) - self.sigma ** 2 / 2
        return [(rng.expovariate(1.0), rng.lognormvariate(mu, self.sigma)) for _ in range(n)]

    def ttfts(self, rate: float, draws: list[tuple[float, float]]) -> list[float]:
        free = [0.0] * self.slots
        t, out = 0.0, []
        for gap, s in draws:
            t += gap / rate
            start = max(t, heapq.heappop(free))
            heapq.heappush(free, start + s)
            out.append(start - t + self.prefill * s)
        return out

    def trial(self, rate: float, n: int, warmup: int, objective: Objective, rng: random.Random) -> TrialResult:
        ttft = self.ttfts(rate, self.draws(n + warmup, rng))[warmup:]
        within = [x <= objective.threshold for x in ttft]
        return TrialResult(tallies={objective.name: tally(within, ttft, objective.threshold)},
                           requests=n + warmup, seconds=(n + warmup) / rate)

    def true_capacity(self, objective: Objective, n: int = 200_000, seed: int = 7) -> float:
        """The rate whose long-run share within the threshold is the objective's (bisection, one
        stream of random numbers for every rate so that the share falls with the rate: drawn once,
        which cuts the time the calibration tests spend here to a third)."""
        draws = self.draws(n, random.Random(seed))
        lo, hi = 1e-3, self.slots / self.mean  # at the service rate the queue grows without bound
        for _ in range(30):
            mid = math.sqrt(lo * hi)
            ttft = self.ttfts(mid, draws)[n // 10:]
            share = sum(x <= objective.threshold for x in ttft) / len(ttft)
            lo, hi = (mid, hi) if share >= objective.share else (lo, mid)
        return math.sqrt(lo * hi)
