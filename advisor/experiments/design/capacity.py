"""The plan of a capacity experiment (`advisor experiment --readout capacity`): the SLO whose
capacity both arms are searched for, the trials' size, and the search's limits.

The ratio's interval is made of the two arms' intervals (advisor/experiments/judgement/judge.py
judge_capacity): each end of each arm's interval is taken at alpha / 4, so that the ratio's two
ends together miss at most alpha (Bonferroni over the two arms, each side).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from advisor.capacity import search as s
from advisor.capacity import trials as tr
from advisor.diagnosis.slo import SLO, load_slo
from advisor.errors import AdvisorError

LEVEL = 0.95  # the ratio's interval
CAPACITY_SIGNAL = "capacity"  # what --readout and a catalog check name
CAPACITY = ("capacity", "per_s")
ALPHA = (1 - LEVEL) / 4  # per end of each arm's interval


class CapacityPlanError(AdvisorError, ValueError):
    pass


@dataclass(frozen=True)
class CapacityPlan:
    slo: SLO
    objectives: tuple[s.Objective, ...]
    trial_requests: int
    warmup_requests: int
    width: float = 0.10
    min_rate: float = s.MIN_RATE
    max_rate: float = s.MAX_RATE
    alpha: float = ALPHA
    start_rate: float | None = None  # None: half a closed-loop burst's throughput on the baseline

    def limits(self, start_rate: float, max_requests: int | None, max_seconds: float | None) -> s.Limits:
        return s.Limits(start_rate=start_rate, max_rate=self.max_rate, min_rate=self.min_rate, width=self.width,
                        alpha=self.alpha, max_requests=max_requests, max_seconds=max_seconds)

    def describe(self) -> list[str]:
        return [f"capacity at the SLO ({'; '.join(o.label for o in self.objectives)}): each arm's highest rate "
                f"at which every objective holds, searched to +-{self.width:.0%} from {self.start_text()}, between "
                f"{self.min_rate:g} and {self.max_rate:g} requests/s",
                f"trials: {self.trial_requests} tallied + {self.warmup_requests} warmup requests each, the arms' "
                "trials in turn (A, B, A, B ...), each trial's arrivals and prompts drawn alike on both arms",
                f"verdict: the ratio of the capacities, its {LEVEL:.0%} interval from both arms' intervals (each "
                f"end at {1 - self.alpha:.2%})"]

    def start_text(self) -> str:
        if self.start_rate is not None:
            return f"{self.start_rate:.3g} requests/s (--start-rate)"
        return "half a closed-loop burst's throughput on the baseline"


def capacity_plan(slo_file: Path | None, *, width: float = 0.10, trial_requests: int | None = None,
                  start_rate: float | None = None) -> CapacityPlan:
    """The plan from the SLO file (None: the default SLOs); one-line errors."""
    if not 0 < width < 0.5:
        raise CapacityPlanError(f"width {width:g}: expected a relative half-width between 0 and 0.5")
    if start_rate is not None and not s.MIN_RATE <= start_rate <= s.MAX_RATE:
        raise CapacityPlanError(f"--start-rate {start_rate:g}: expected a rate between {s.MIN_RATE:g} and "
                                f"{s.MAX_RATE:g} requests/s")
    slo = load_slo(slo_file)
    try:
        objs = tr.objectives(slo, set(slo.model_fields_set) if slo_file else None)
    except tr.CapacityInputError as e:
        raise CapacityPlanError(f"{slo_file}: {e}") from None
    alpha = ALPHA
    # A trial must be able to show its strictest objective holding at this alpha: with fewer
    # requests, every trial of a search that holds is unclear, and no interval can close.
    least = max(s.needed(o.share, alpha) for o in objs)
    if trial_requests is not None and trial_requests < least:
        strictest = max(objs, key=lambda o: s.needed(o.share, alpha))
        raise CapacityPlanError(f"--block-requests {trial_requests}: a capacity trial needs at least {least} "
                                f"requests to show {strictest.label} holding at {1 - alpha:.2%}")
    size = trial_requests or max(tr.trial_size(objs), least)
    return CapacityPlan(slo=slo, objectives=tuple(objs), trial_requests=size, warmup_requests=tr.warmup_size(size),
                        width=width, alpha=alpha, start_rate=start_rate)
