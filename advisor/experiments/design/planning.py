"""How many blocks, of how many requests, an experiment needs, and when it may stop.

The planner works on the log scale of the primary readout's block statistic (a block's median, p95,
p99 or mean; a block readout's one value): between two blocks of one arm it varies with SD sigma,
made of a drift part (the machine, the caches, a neighbour: it does not shrink with the block) and a
sampling part (it shrinks as 1/sqrt(requests per block)):

    sigma(n)^2 = drift^2 + sampling^2 * n0 / n

Both parts come from the target's A/A calibration (advisor/experiments/design/calibration.py) when one is
stored, else from CONSERVATIVE, stated wherever it is used. An effect e is a ratio 1 + e (the
harder direction to detect: log(1.3) < -log(0.7)). The design is the smallest maximum of blocks per
arm whose sequential test (a repeated confidence interval at the boundary's level at each look, see
advisor/experiments/stats.py) reaches power `power` at that effect, found by simulating the looks
with Student-t critical values; rank statistics (p50 and the block readouts) pay their asymptotic
relative efficiency against the t-test (below the asymptotic 3/pi at so few blocks: see
_RANK_EFFICIENCY).

A percentile primary needs samples beyond it: at least TAIL_SAMPLES per arm at the first look, so
that the interval is about the tail and not about the largest few samples. The planner raises the
requests per block to get there, or refuses the design with the numbers when they were fixed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from advisor.errors import AdvisorError
from advisor.experiments import stats
from advisor.experiments.design.plan import Stopping
from advisor.experiments.design.plan import SIGNAL_READOUT

TAIL_SAMPLES = 10  # per arm, beyond the primary's percentile, at the first look
DEFAULT_EFFECT = 0.30
DEFAULT_POWER = 0.80
MAX_BLOCKS_PER_ARM = 24  # above this the plan is refused: the noise is too large for the effect
REQUESTS_GROWTH = 8  # the most the planner multiplies the requests per block by, against sampling noise
_QUANTILE = {s: stats._QUANTILE[s] for s in ("p95", "p99")}  # the percentiles that need a tail
# A rank test's efficiency against the t-test: 3/pi asymptotically; the exact test on 5-10 blocks
# per arm does worse (its levels are discrete): planned at 3/pi, a 20 % effect on a p50 got 77.5 %
# of the promised 80 % over 1000 simulated runs (benchmarks/stats_calibration.py).
_RANK_EFFICIENCY = 0.85


@dataclass(frozen=True)
class Noise:
    """The log-SD of one readout's block statistic between blocks of one arm, split in two."""

    drift: float
    sampling: float  # at `requests` per block
    requests: int
    source: str  # "A/A calibration exp-..." or the conservative default's statement

    def sd(self, requests: int) -> float:
        return math.sqrt(self.drift ** 2 + self.sampling ** 2 * self.requests / max(1, requests))


# Stated, not measured: what a plan assumes without an A/A calibration of the target. Log-SD of a
# block statistic at 32 requests per block, half drift and half sampling (in variance). Chosen
# above what the A/A runs on the 2-core development machine measured (tests/e2e), so that a plan
# from it is long rather than short.
CONSERVATIVE = {"p50": 0.15, "mean": 0.20, "p95": 0.25, "p99": 0.35, "per_s": 0.10, "ratio": 0.30}
CONSERVATIVE_REQUESTS = 32


def conservative(statistic: str) -> Noise:
    total = CONSERVATIVE[statistic]
    half = total / math.sqrt(2)
    return Noise(drift=half, sampling=half, requests=CONSERVATIVE_REQUESTS,
                 source=f"conservative default (no A/A calibration stored for this target): block log-SD "
                        f"{total:g} at {CONSERVATIVE_REQUESTS} requests per block, half of it drift")


class PlanError(AdvisorError, ValueError):
    pass


def stopping(statistic: str, max_blocks: int, *, sequential: bool = True, alpha: float = 0.05,
             boundary: stats.Boundary = "wang-tsiatis") -> Stopping:
    """The looks of a design: the first one where the primary's method can reach its level."""
    if not sequential:
        return Stopping(sequential=False, alpha=alpha, first_look=max_blocks, levels=(alpha,))
    rank = statistic in stats.RANK_STATISTICS
    low = stats.MIN_BLOCKS if rank else stats.MIN_BLOCKS_BOOTSTRAP
    for k in range(low, max_blocks + 1):
        levels = stats.boundary_alphas(k, max_blocks, alpha, boundary)
        if not rank or stats._moses_c(k, k, levels[0]) is not None:
            return Stopping(sequential=True, boundary=boundary, alpha=alpha, first_look=k, levels=levels)
    return Stopping(sequential=False, alpha=alpha, first_look=max_blocks, levels=(alpha,))


def power(sd: float, effect: float, max_blocks: int, stop: Stopping, statistic: str,
          paths: int = 4000, seed: int = 7) -> tuple[float, float]:
    """(power, mean blocks per arm used) of the design at a ratio 1 + effect, by simulating the
    looks: the log ratio's estimate after k blocks per arm is normal around log(1 + effect) with SD
    sd * sqrt(2 / k), independent increments, judged against Student's t at the look's level."""
    delta = math.log1p(effect)
    eff = _RANK_EFFICIENCY if statistic in stats.RANK_STATISTICS else 1.0
    rng = np.random.default_rng(seed)
    ks = np.arange(1, max_blocks + 1)
    # sum of per-pair differences; the estimate after k pairs is their mean
    steps = rng.standard_normal((paths, max_blocks)) * sd * math.sqrt(2 / eff) + delta
    est = np.cumsum(steps, axis=1) / ks
    se = sd * np.sqrt(2 / (eff * ks))
    decided = np.zeros(paths, bool)
    used = np.full(paths, float(max_blocks))
    for k in range(1, max_blocks + 1):
        level = stop.level_at(k, max_blocks)
        if level is None:
            continue
        crit = stats.scipy_stats().t.ppf(1 - level / 2, max(1, 2 * k - 2)) * se[k - 1]
        now = ~decided & (np.abs(est[:, k - 1]) > crit)
        used[now] = k
        decided |= now
    return float(decided.mean()), float(used.mean())


@dataclass(frozen=True)
class Plan:
    statistic: str
    effect: float
    target_power: float
    noise: Noise
    requests_per_block: int
    max_blocks: int
    stopping: Stopping
    power: float
    expected_blocks: float
    sized_requests: bool  # the planner raised the requests per block for the tail

    def describe(self) -> list[str]:
        n, k = self.requests_per_block, self.max_blocks
        return [
            f"planned for a {self.effect:.0%} effect on the {self.statistic} at {self.target_power:.0%} power: "
            f"at most {k} blocks per arm of {n} requests ({2 * k * n} requests in all), "
            f"{self.power:.0%} power, {self.expected_blocks:.1f} blocks per arm expected at that effect",
            f"noise: block log-SD {self.noise.sd(n):.3f} at {n} requests per block, from the "
            f"{self.noise.source}" + (f"; requests per block raised to {n} (for {TAIL_SAMPLES} samples beyond "
                                      "a percentile at the first look, or against sampling noise)"
                                      if self.sized_requests else ""),
            self.stopping.describe(k),
        ]


def tail_requests(statistic: str, first_look: int) -> int:
    """Requests per block so that TAIL_SAMPLES per arm lie beyond a percentile at the first look."""
    q = _QUANTILE.get(statistic)
    if q is None:
        return 1
    return math.ceil(TAIL_SAMPLES / ((1 - q) * first_look) - 1e-9)


def plan(statistic: str, noise: Noise, *, requests_per_block: int, requests_fixed: bool = False,
         max_blocks: int | None = None, effect: float = DEFAULT_EFFECT, target_power: float = DEFAULT_POWER,
         sequential: bool = True, alpha: float = 0.05, boundary: stats.Boundary = "wang-tsiatis") -> Plan:
    """The design for the primary readout: max blocks per arm (given, or the fewest with the target
    power) and requests per block (given; unless fixed, raised for a percentile's tail, and raised
    up to REQUESTS_GROWTH-fold where the sampling noise is what keeps the plan out of reach)."""
    if not 0 < effect < 10:
        raise PlanError(f"--effect must lie in (0, 10), got {effect:g}")

    def sized(k: int, n: int) -> tuple[Stopping, int, bool]:
        stop = stopping(statistic, k, sequential=sequential, alpha=alpha, boundary=boundary)
        need = tail_requests(statistic, stop.first_look)
        if n >= need:
            return stop, n, False
        if requests_fixed:
            beyond = n * stop.first_look * (1 - _QUANTILE[statistic])
            raise PlanError(f"a {statistic} primary needs {TAIL_SAMPLES} samples per arm beyond it at the first look "
                            f"({stop.first_look} blocks per arm): {n} requests per block give {beyond:.1f}; use at "
                            f"least {need} requests per block, or a p50 readout")
        return stop, need, True

    n0 = requests_per_block
    if max_blocks is not None:
        stop, n_used, raised = sized(max_blocks, n0)
        p, used = power(noise.sd(n_used), effect, max_blocks, stop, statistic)
        return Plan(statistic, effect, target_power, noise, n_used, max_blocks, stop, p, used, raised)
    low = stats.min_blocks_per_arm(statistic, alpha)  # type: ignore[arg-type]
    for n in ([n0] if requests_fixed else [n0 * g for g in (1, 2, 4, REQUESTS_GROWTH)]):
        for k in range(low, MAX_BLOCKS_PER_ARM + 1):
            stop, n_used, raised = sized(k, n)
            p, used = power(noise.sd(n_used), effect, k, stop, statistic)
            if p >= target_power:
                return Plan(statistic, effect, target_power, noise, n_used, k, stop, p, used, raised or n != n0)
    grown = "" if requests_fixed else f" even at {REQUESTS_GROWTH * n0} requests per block"
    raise PlanError(f"a {effect:.0%} effect on the {statistic} needs more than {MAX_BLOCKS_PER_ARM} blocks per arm "
                    f"at {target_power:.0%} power{grown} with block log-SD {noise.sd(n0):.3f} at {n0} requests "
                    f"({noise.source}); use a larger --effect, a steadier target, or give --blocks")


@dataclass(frozen=True)
class PlanRow:
    metric: str
    statistic: str
    noise: Noise
    plan: Plan | None
    problem: str | None


def table(calibration, effect: float, requests_per_block: int | None) -> list[PlanRow]:
    """A plan for every primary readout a check can name, from the calibration (or the default)."""

    rows = []
    for metric, statistic in dict.fromkeys(SIGNAL_READOUT.values()):
        noise = (calibration.noise(metric, statistic) if calibration is not None else None) or conservative(statistic)
        n = requests_per_block or noise.requests
        try:
            rows.append(PlanRow(metric, statistic, noise, plan(statistic, noise, requests_per_block=n,
                                                               requests_fixed=requests_per_block is not None,
                                                               effect=effect), None))
        except PlanError as e:
            rows.append(PlanRow(metric, statistic, noise, None, str(e)))
    return rows
