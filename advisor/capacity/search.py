"""The rate search behind `advisor capacity`: the highest arrival rate at which every objective holds,
with an interval, from trials whose outcomes are noisy.

An objective is an SLO read as a share of requests: "TTFT p95 <= 1 s" holds when at least 95 % of
the requests have their first token within 1 s; "error rate <= 1 %" when at least 99 % end without
an error. A trial at a rate tallies, per objective, the requests within it. Its outcome is decided
only where the data decide it: a one-sided Clopper-Pearson bound at level 1 - alpha puts the share
clearly above the objective's (pass), clearly below it (fail), or neither (unclear). Requests of one
trial are not independent (a burst makes a run of slow ones), so the bound is taken on an effective
count, the requests over the integrated autocorrelation time of the latencies the objective reads
(those under a tenth of its threshold counted as equal: tally).

The search brackets (doubling up from the start rate until a clear fail, halving down until a clear
pass), then bisects in log-rate between the highest clear pass and the lowest clear fail. An unclear
trial is first extended at the same rate (its requests added to the tally: every trial is reused),
then, if still unclear, left as a point on the curve while the search probes either side of it. It
stops when the interval [highest pass, lowest fail] is within the requested relative width, when
nothing between its ends can still be told apart, or when a guardrail ends it (a partial answer,
never a number without its interval).

Each end of the interval is wrong with probability at most alpha when a trial's tally is what the
bound assumes; `tests/unit/test_capacity_search.py` measures the coverage on a simulated queue.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Literal

Outcome = Literal["pass", "fail", "unclear"]
Status = Literal["bounded", "at least", "zero", "partial", "noise-limited", "decided"]

ALPHA = 0.05  # per end of the interval: a 90 % interval
MAX_RATE, MIN_RATE = 200.0, 0.05  # requests per second: the search's default ceiling and floor


@dataclass(frozen=True)
class Objective:
    """One SLO as a share: `share` of the requests must be within `threshold` (None: the error rate)."""

    name: str
    share: float
    threshold: float | None
    label: str  # as a user reads it: "TTFT p95 <= 1 s"


@dataclass
class Tally:
    within: int = 0
    n: int = 0
    tau: float = 1.0  # integrated autocorrelation time of the trial's sequence (1: independent)
    # The objective's per-request values (seconds; inf for a failed request), where it reads a
    # latency: the estimate is fitted on their percentile, which says how far from the threshold a
    # trial was, where the share within says only which side.
    values: list[float] = field(default_factory=list, repr=False)

    @property
    def share(self) -> float | None:
        return self.within / self.n if self.n else None

    def quantile(self, share: float) -> float | None:
        """The smallest value that `share` of the requests are within (their order statistic
        ceil(share x n)): at most the threshold exactly when the share within is at least `share`.
        None without values."""
        if not self.values:
            return None
        v = sorted(self.values)
        return v[min(len(v), max(1, math.ceil(share * len(v) - 1e-9))) - 1]

    def effective(self) -> tuple[float, float]:
        """(within, n) over the integrated autocorrelation time: n / tau requests' worth of evidence."""
        f = 1.0 / max(self.tau, 1.0)
        return self.within * f, self.n * f

    def merged(self, other: Tally) -> Tally:
        n = self.n + other.n
        # Two independent runs: their effective counts add.
        eff = (self.n / self.tau if self.n else 0.0) + (other.n / other.tau if other.n else 0.0)
        return Tally(self.within + other.within, n, n / eff if eff > 0 else 1.0, self.values + other.values)


def autocorrelation_time(values: Sequence[float]) -> float:
    """1 + 2 x the sum of the sequence's autocorrelations, summed while they stay positive (Geyer's
    initial positive sequence, in pairs), capped at a tenth of the sequence. A queue's latencies
    are correlated for as long as a backlog lasts: read from the values themselves, this is known
    even when every request met its objective."""
    n = len(values)
    if n < 10 or min(values) == max(values):  # equal values: no wander (their float mean's rounding is not one)
        return 1.0
    m = sum(values) / n
    d = [v - m for v in values]
    var = sum(x * x for x in d) / n
    if var <= 0:
        return 1.0

    def rho(k: int) -> float:
        return sum(d[i] * d[i + k] for i in range(n - k)) / (n * var)

    tau, k = 1.0, 1
    while k + 1 < n // 10:
        pair = rho(k) + rho(k + 1)
        if pair <= 0:
            break
        tau += 2 * pair
        k += 2
    return min(tau, n / 10)


# Latencies below this share of the threshold count as equal in the correlation: a wander of a few
# milliseconds under a one-second SLO is not a backlog. On the live CPU vLLM (the e2e's capacity
# readout, 2-core host), the candidate's three runs at 6.96/s, every TTFT under 40 ms against 1 s,
# read correlation times of 3.6, 2.8 and 1.5 from the raw values: 86 requests were too few each
# time and the trial was extended twice. On the simulated queues the interval's coverage is the same
# with this floor as without it (200 seeds a shape; 8, 4, 1 and 2 slots): 90.0/96.0/95.0/85.0 %
# against 91.0/95.5/95.5/84.0 % at 200 requests a trial, 90.5/89.0/82.0/82.5 % against
# 91.5/89.0/82.5/82.0 % at 86. A floor of a quarter of the threshold lost it at the sharp knee (8
# slots, 60 seeds: 85 % against 92 %, 78 % against 88 %): a backlog that builds up below the
# threshold is what a trial just past the capacity shows.
CORRELATION_FLOOR = 0.1


def tally(within: Sequence[bool], values: Sequence[float] | None = None, threshold: float | None = None) -> Tally:
    """A tally of one trial's requests in their order of arrival. values: the latency the objective
    reads, per request (inf for a failure), and threshold its SLO: their correlation is the trial's,
    known even when every request met the objective, read from the values between a tenth of the
    threshold (CORRELATION_FLOOR) and a cap for failures. Without them, the within/outside
    sequence's (the error rate)."""
    n = len(within)
    if values is None:
        return Tally(sum(within), n, autocorrelation_time([1.0 if w else 0.0 for w in within]))
    if threshold is None or len(values) != n:
        raise ValueError("a tally of latencies needs one per request and the threshold they are read against")
    vals = list(values)
    floor = CORRELATION_FLOOR * threshold
    cap = 2 * max((v for v in vals if math.isfinite(v)), default=threshold) + threshold  # a failure's place
    seq = [min(max(v, floor), cap) for v in vals]
    return Tally(sum(within), n, autocorrelation_time(seq), vals)


def bounds(t: Tally, alpha: float) -> tuple[float, float]:
    """One-sided Clopper-Pearson bounds (lower, upper) on the share, each at level 1 - alpha."""
    from scipy import stats

    k, n = t.effective()
    if n <= 0:
        return 0.0, 1.0
    lower = 0.0 if k <= 0 else float(stats.beta.ppf(alpha, k, n - k + 1))
    upper = 1.0 if k >= n else float(stats.beta.ppf(1 - alpha, k + 1, n - k))
    return lower, upper


def needed(share: float, alpha: float = ALPHA) -> int:
    """Requests a trial needs before a clear pass is possible at all (every one within)."""
    return max(1, math.ceil(math.log(alpha) / math.log(share))) if share < 1 else 1


def judge(tallies: dict[str, Tally], objectives: Sequence[Objective], alpha: float) -> tuple[Outcome, str | None]:
    """A trial's outcome over all objectives, and the objective that decided a fail (or kept it
    unclear)."""
    unclear = None
    for o in objectives:
        t = tallies.get(o.name)
        if t is None or t.n == 0:
            unclear = unclear or o.name
            continue
        lower, upper = bounds(t, alpha)
        if upper < o.share:
            return "fail", o.name
        if lower < o.share:
            unclear = unclear or o.name
    return ("unclear", unclear) if unclear else ("pass", None)


@dataclass
class Trial:
    rate: float
    tallies: dict[str, Tally]
    requests: int
    seconds: float
    outcome: Outcome = "unclear"
    decided_by: str | None = None
    extended: int = 0  # how many times more requests were added at this rate
    valid: bool = True  # the load generator kept its schedule
    why_invalid: str | None = None
    goodput_rps: float | None = None
    output_tokens_per_s: float | None = None


@dataclass
class TrialResult:
    """What one run of requests at a rate gives the search."""

    tallies: dict[str, Tally]
    requests: int
    seconds: float
    valid: bool = True
    why_invalid: str | None = None
    goodput_rps: float | None = None
    output_tokens_per_s: float | None = None


@dataclass
class Limits:
    start_rate: float
    max_rate: float
    min_rate: float
    width: float = 0.10  # the interval within +-width of its middle
    alpha: float = ALPHA
    max_extensions: int = 2
    max_invalid: int = 2  # trials whose load generator fell behind, retried before the search gives up
    max_trials: int = 24
    max_requests: int | None = None
    max_seconds: float | None = None


@dataclass
class Answer:
    status: Status
    low: float | None  # the highest rate that clearly held (None: none did)
    high: float | None  # the lowest rate that clearly broke (None: none did)
    estimate: float | None
    binding: str | None  # the objective that broke first
    trials: list[Trial] = field(default_factory=list)
    requests: int = 0
    seconds: float = 0.0
    stopped: str | None = None  # why the search ended before its width, when it did


def _crossing(trials: list[Trial], objective: Objective, low: float, high: float) -> float:
    """The estimate between low and high. For a latency objective: where a straight line through the
    trials there, log of the measured percentile against log-rate (least squares), meets the
    threshold, held within [low, high]. The shares say little more than which side of the target a
    trial fell (a 95 % share moves in steps of one request in 200); the percentile says how far. On
    the simulated queues of tests/unit/test_capacity_search.py (300 seeds a shape) the median error
    of the estimate went from 10.6/9.8/10.2 % to 3.7/4.8/8.7 % at a width of 0.2, and from
    4.2/6.0/8.8 % to 4.4/4.2/7.6 % at 0.1, where the interval itself is narrow.
    Else (the error rate, a line that does not rise, fewer than two rates): where the measured share
    crosses its target, by linear interpolation in log-rate; the geometric middle when the shares do
    not cross in order."""
    fitted = _fitted_crossing(trials, objective, low, high)
    if fitted is not None:
        return fitted
    pts = sorted((t.rate, t.tallies[objective.name].share) for t in trials
                 if low <= t.rate <= high and objective.name in t.tallies and t.tallies[objective.name].n)
    for (r0, s0), (r1, s1) in zip(pts, pts[1:]):
        if s0 is not None and s1 is not None and s0 >= objective.share > s1:
            f = (s0 - objective.share) / (s0 - s1)
            return math.exp(math.log(r0) + f * (math.log(r1) - math.log(r0)))
    return math.sqrt(low * high)


def _fitted_crossing(trials: list[Trial], objective: Objective, low: float, high: float) -> float | None:
    if objective.threshold is None or objective.threshold <= 0:
        return None
    pts = []
    for t in trials:
        tl = t.tallies.get(objective.name)
        q = tl.quantile(objective.share) if tl is not None and t.valid and low <= t.rate <= high else None
        if q is not None and 0 < q < math.inf:
            pts.append((math.log(t.rate), math.log(q)))
    if len({x for x, _ in pts}) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    slope = sum((x - mx) * (y - my) for x, y in pts) / sxx
    if slope <= 0:  # latency that does not rise with the rate says nothing about where it meets the threshold
        return None
    at = math.exp(mx + (math.log(objective.threshold) - my) / slope)
    return min(max(at, low), high)


def search(run: Callable[[float], TrialResult], objectives: Sequence[Objective], limits: Limits,
           on_trial: Callable[[Trial], None] | None = None) -> Answer:
    """Run trials through `run(rate)` until the capacity is bracketed within the width, and answer."""
    walk = steps(objectives, limits, on_trial)
    try:
        rate = next(walk)
        while True:
            rate = walk.send(run(rate))
    except StopIteration as done:
        return done.value
    finally:  # on an error or an interrupt, a trial being extended is said now, not when collected
        walk.close()


def steps(objectives: Sequence[Objective], limits: Limits,
          on_trial: Callable[[Trial], None] | None = None) -> Generator[float, TrialResult, Answer]:
    """The search as a generator: it yields the rate of the next run and is sent that run's
    TrialResult; it returns the Answer. Two searches stepped in turn interleave their trials (an
    experiment's arms, so that drift hits both)."""
    lim = limits
    trials: list[Trial] = []
    spent_req, spent_s = 0, 0.0
    stopped: str | None = None

    def over_budget() -> str | None:
        if lim.max_requests is not None and spent_req >= lim.max_requests:
            return f"the request budget ({lim.max_requests}) is spent"
        if lim.max_seconds is not None and spent_s >= lim.max_seconds:
            return f"the time budget ({lim.max_seconds:.0f} s) is spent"
        if len(trials) >= lim.max_trials:
            return f"{lim.max_trials} trials run"
        return None

    def at(rate: float) -> Generator[float, TrialResult, Trial]:
        nonlocal spent_req, spent_s
        got = yield rate
        spent_req += got.requests
        spent_s += got.seconds
        t = Trial(rate, got.tallies, got.requests, got.seconds, valid=got.valid, why_invalid=got.why_invalid,
                  goodput_rps=got.goodput_rps, output_tokens_per_s=got.output_tokens_per_s)
        t.outcome, t.decided_by = judge(t.tallies, objectives, lim.alpha) if t.valid else ("unclear", None)
        while t.valid and t.outcome == "unclear" and t.extended < lim.max_extensions and not over_budget():
            try:
                more = yield rate
            except GeneratorExit:  # ended from outside between runs at this rate: they still count
                trials.append(t)
                if on_trial:
                    on_trial(t)
                raise
            spent_req += more.requests
            spent_s += more.seconds
            t.tallies = {k: v.merged(more.tallies.get(k, Tally())) for k, v in t.tallies.items()}
            t.requests += more.requests
            t.seconds += more.seconds
            t.extended += 1
            t.valid, t.why_invalid = more.valid, more.why_invalid
            if t.valid:
                t.outcome, t.decided_by = judge(t.tallies, objectives, lim.alpha)
        trials.append(t)
        if on_trial:
            on_trial(t)
        return t

    def ends() -> tuple[float | None, float | None]:
        return _ends(trials)

    ratio = (1 + lim.width) / (1 - lim.width)
    rate = min(max(lim.start_rate, lim.min_rate), lim.max_rate)
    invalid = 0
    while True:
        stopped = over_budget()
        if stopped:
            break
        t = yield from at(rate)
        if not t.valid:  # a busy host, for a moment or for good: tried again at the same rate, then given up
            invalid += 1
            if invalid > lim.max_invalid:
                stopped = (f"the load generator could not keep {rate:.3g} requests/s ({t.why_invalid}); "
                           f"{invalid} trials were invalid")
                break
            continue
        low, high = ends()
        if high is None:  # no clear fail yet: up
            top = max(x.rate for x in trials)
            if top >= lim.max_rate:
                if low is not None and low >= lim.max_rate:
                    return _answer("at least", low, None, objectives, trials, spent_req, spent_s, None)
                rate = lim.max_rate
                if any(x.rate == rate for x in trials):  # the ceiling was tried and is unclear
                    stopped = f"the rate ceiling {lim.max_rate:.3g}/s was reached before a clear break"
                    break
                continue
            rate = min(top * 2, lim.max_rate)
            continue
        if low is None:  # no clear pass below the break: down
            bottom = min(x.rate for x in trials)
            if bottom <= lim.min_rate:
                if any(x.rate <= lim.min_rate and x.outcome == "fail" for x in trials):
                    return _answer("zero", None, high, objectives, trials, spent_req, spent_s, None)
                stopped = f"the rate floor {lim.min_rate:.3g}/s was reached without a clear pass"
                break
            rate = max(bottom / 2, lim.min_rate)
            continue
        if high / low <= ratio:
            return _answer("bounded", low, high, objectives, trials, spent_req, spent_s, None)
        # The widest gap (in log-rate) between tried rates inside the interval gets the next probe;
        # none wider than the width means the unclear trials inside cannot be told apart.
        inside = sorted({low, high, *(x.rate for x in trials if low < x.rate < high)})
        gap, a, b = max((math.log(b / a), a, b) for a, b in zip(inside, inside[1:]))
        if math.exp(gap) <= ratio:
            return _answer("noise-limited", low, high, objectives, trials, spent_req, spent_s,
                           "between these rates the trials could not tell the objectives' shares from their targets")
        rate = math.sqrt(a * b)
    low, high = ends()
    return _answer("partial", low, high, objectives, trials, spent_req, spent_s, stopped)


def _ends(trials: list[Trial]) -> tuple[float | None, float | None]:
    """(the highest clear pass below the lowest clear fail, that fail)."""
    fails = [t.rate for t in trials if t.outcome == "fail"]
    high = min(fails) if fails else None
    passes = [t.rate for t in trials if t.outcome == "pass" and (high is None or t.rate < high)]
    return (max(passes) if passes else None), high


def partial(trials: list[Trial], objectives: Sequence[Objective], why: str,
            status: Status = "partial") -> Answer:
    """The answer of a search ended from outside, its interval so far: "partial" when an experiment
    was aborted, "decided" when its verdict no longer depended on a narrower interval."""
    low, high = _ends(trials)
    return _answer(status, low, high, objectives, trials, sum(t.requests for t in trials),
                   sum(t.seconds for t in trials), why)


def _answer(status: Status, low, high, objectives, trials, requests, seconds, stopped) -> Answer:
    binding = None
    fails = [t for t in trials if t.outcome == "fail" and (high is None or t.rate == high)]
    if fails:
        binding = fails[0].decided_by
    estimate = None
    if low is not None and high is not None:
        o = next((o for o in objectives if o.name == binding), objectives[0])
        estimate = _crossing(trials, o, low, high)
    elif status == "at least":
        estimate = low
    elif status == "zero":
        estimate = 0.0
    return Answer(status, low, high, estimate, binding, trials, requests, seconds, stopped)
