"""What `advisor capacity` answers: the capacity with its interval, every trial as a point of the
attainment curve, and the plan for a peak."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime

from pydantic import BaseModel, Field

from advisor import units
from advisor.capacity.search import ALPHA, Answer, Objective, bounds

SECONDS_PER_MONTH = 730 * 3600  # the cloud bills' month: 730 hours


class ObjectiveRow(BaseModel):
    name: str
    label: str
    share: float = Field(description="the share of requests that must be within")
    threshold_s: float | None = Field(description="seconds; None for the error rate")


class TrialPoint(BaseModel):
    rate: float = Field(description="planned arrival rate, requests per second")
    requests: int = Field(description="requests sent, warmup included")
    seconds: float
    outcome: str = Field(description="pass, fail or unclear: whether every objective clearly held")
    decided_by: str | None = Field(description="the objective that broke it, or kept it unclear")
    extended: int = Field(description="times more requests were added at this rate")
    valid: bool = Field(description="the load generator kept its schedule")
    why_invalid: str | None = None
    shares: dict[str, float | None] = Field(description="per objective: the share of tallied requests within")
    bounds: dict[str, tuple[float, float]] = Field(description="per objective: one-sided bounds on the share "
                                                   "(each at 95 %), over the autocorrelation-adjusted count")
    tallied: dict[str, int]
    percentiles: dict[str, float | None] = Field(default={}, description="per latency objective: the measured "
                                                 "percentile it reads (p95 for a share of 0.95), seconds; None "
                                                 "where failed requests reach it")
    goodput_rps: float | None = None
    output_tokens_per_s: float | None = None


class PeakPlan(BaseModel):
    peak_rps: float
    headroom: float = Field(description="the share of capacity a replica is planned to run at, e.g. 0.8")
    replicas: int = Field(description="at the capacity's estimate")
    replicas_range: tuple[int, int | None] = Field(description="at the interval's high and low ends (None: "
                                                   "no upper figure, the capacity's low end is unknown)")
    per_hour: float | None = None
    currency: str | None = None
    units_per_replica: int | None = None
    monthly_cost: float | None = None
    monthly_cost_range: tuple[float, float | None] | None = None
    per_million_output_tokens: float | None = Field(default=None, description="at capacity, per replica")


class CapacityResult(BaseModel):
    target: str
    model: str
    workload: str
    started_at: datetime
    objectives: list[ObjectiveRow]
    status: str = Field(description="bounded, noise-limited (bounded, wider than asked), at least (the rate "
                        "ceiling held), zero (the SLO broke at the floor), partial (a guardrail ended it), "
                        "decided (an experiment's verdict was decided before the width was reached)")
    level: float = Field(description="the interval's confidence: each end at 1 - alpha")
    width_goal: float
    low: float | None = Field(description="the highest rate that clearly held")
    high: float | None = Field(description="the lowest rate that clearly broke")
    estimate: float | None = Field(description="where the binding objective's percentile, fitted over the "
                                   "trials between low and high, meets its threshold")
    binding: str | None = Field(description="the objective that breaks first")
    goodput_at_low: float | None = Field(default=None, description="requests per second within every SLO, "
                                         "measured at the highest rate that held")
    requests: int
    seconds: float
    trial_requests: int
    warmup_requests: int
    stopped: str | None = None
    notes: list[str] = []
    trials: list[TrialPoint]
    plan: PeakPlan | None = None

    @property
    def summary(self) -> str:
        """The answer in one line."""
        if self.status == "zero":
            return (f"capacity 0: {self.binding_label} broke even at {self.high:.3g} requests/s, the lowest rate "
                    "tried")
        if self.status == "at least":
            return f"capacity at least {self.low:.3g} requests/s: every SLO held at the rate ceiling"
        if self.low is None and self.high is None:
            return f"no capacity measured: {self.stopped or 'no trial decided'}"
        head = "partial answer: " if self.status == "partial" else ""
        tail = f" ({self.binding_label} binds first)" if self.binding else ""
        return f"{head}capacity {interval_text(self.low, self.high, self.estimate, self.level)}{tail}"

    @property
    def binding_label(self) -> str:
        return next((o.label for o in self.objectives if o.name == self.binding), self.binding or "an SLO")


def interval_text(low: float | None, high: float | None, estimate: float | None, level: float) -> str:
    """"5.1 requests/s, 90 % interval [4.6, 5.6]": a missing low end is 0, a missing high end unknown."""
    lo = f"{low:.3g}" if low is not None else "0"
    hi = f"{high:.3g}" if high is not None else "unknown"
    est = f"{estimate:.3g} requests/s, " if estimate is not None else ""
    return f"{est}{100 * level:.3g} % interval [{lo}, {hi}]"


def result_of(answer: Answer, objs: Sequence[Objective], *, target: str, model: str, workload: str,
              started_at: datetime, alpha: float, width: float, trial_requests: int, warmup_requests: int,
              notes: Sequence[str] = ()) -> CapacityResult:
    """The search's answer as a CapacityResult; the note a noise-limited answer needs added."""
    low_trial = next((t for t in answer.trials if t.rate == answer.low), None)
    result = CapacityResult(
        target=target, model=model, workload=workload, started_at=started_at,
        objectives=[ObjectiveRow(name=o.name, label=o.label, share=o.share, threshold_s=o.threshold) for o in objs],
        status=answer.status, level=1 - 2 * alpha, width_goal=width, low=answer.low, high=answer.high,
        estimate=answer.estimate, binding=answer.binding,
        goodput_at_low=low_trial.goodput_rps if low_trial else None, requests=answer.requests,
        seconds=answer.seconds, trial_requests=trial_requests, warmup_requests=warmup_requests,
        stopped=answer.stopped, notes=list(notes), trials=points(answer, objs, alpha))
    if answer.status == "noise-limited":
        result.notes.append(f"the interval is wider than +-{width:.0%}: near the capacity the trials could not tell "
                            f"the shares from their targets with {trial_requests} requests (and 2 extensions) each")
    return result


def points(answer: Answer, objs: list[Objective], alpha: float = ALPHA) -> list[TrialPoint]:
    return [TrialPoint(rate=t.rate, requests=t.requests, seconds=t.seconds, outcome=t.outcome,
                       decided_by=t.decided_by, extended=t.extended, valid=t.valid, why_invalid=t.why_invalid,
                       shares={o.name: t.tallies[o.name].share for o in objs if o.name in t.tallies},
                       bounds={o.name: bounds(t.tallies[o.name], alpha) for o in objs if o.name in t.tallies},
                       tallied={o.name: t.tallies[o.name].n for o in objs if o.name in t.tallies},
                       percentiles={o.name: _finite(t.tallies[o.name].quantile(o.share)) for o in objs
                                    if o.name in t.tallies and o.threshold is not None},
                       goodput_rps=t.goodput_rps, output_tokens_per_s=t.output_tokens_per_s)
            for t in answer.trials]


def percentile_text(share: float, seconds: float | None) -> str:
    """" (p95 431.0 ms)": a trial's measured percentile beside its share, where it is finite."""
    return f" (p{100 * share:.3g} {units.fmt(seconds, 's')})" if seconds is not None and math.isfinite(seconds) else ""


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def plan_peak(result: CapacityResult, peak: float, headroom: float, per_hour: float | None = None,
              currency: str | None = None, units: int | None = None) -> PeakPlan:
    """Replicas for a peak at `headroom` of the measured capacity per replica: at the estimate, and
    over the interval (its high end needs the fewest, its low end the most); with a price, what
    they cost a month and what a million output tokens cost at capacity."""
    def need(cap: float | None) -> int | None:
        if cap is None or cap <= 0:
            return None
        return max(1, math.ceil(peak / (cap * headroom)))

    est = result.estimate if result.estimate else result.low
    n = need(est) or 0
    hi_n = need(result.low)
    lo_n = need(result.high) or n
    plan = PeakPlan(peak_rps=peak, headroom=headroom, replicas=n, replicas_range=(lo_n, hi_n))
    if per_hour is not None and units:
        hourly = per_hour * units
        plan.per_hour, plan.currency, plan.units_per_replica = per_hour, currency, units
        plan.monthly_cost = n * hourly * SECONDS_PER_MONTH / 3600
        plan.monthly_cost_range = (lo_n * hourly * SECONDS_PER_MONTH / 3600,
                                   hi_n * hourly * SECONDS_PER_MONTH / 3600 if hi_n else None)
        at = next((t for t in result.trials if t.rate == result.low and t.output_tokens_per_s), None)
        if at is not None:
            plan.per_million_output_tokens = hourly / 3600 / at.output_tokens_per_s * 1e6
    return plan
