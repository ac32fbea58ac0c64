"""What each arm's cost is computed from (advisor/cost.py Pricing): the price, and the accelerator
count each arm holds: the same on both arms, except where the knob itself changes it (tensor and
data parallel), read off each arm's own argv. The cost itself is the judgement's
(advisor/experiments/judgement/judge.py), from the throughput it compared."""

from __future__ import annotations

from advisor import knobs
from advisor.cost import Price, Pricing, units_for
from advisor.experiments.design.plan import Design
from probes.gpu import read_gpus

# The knobs that change how many accelerators one arm holds: each arm's count is multiplied by the
# value its own argv sets (read with the catalog's flags for the engine).
COUNT_KNOBS = ("tensor_parallel", "data_parallel")


def _multiplier(args: list[str], mechanism: str, engine: str) -> int:
    """The tensor- or data-parallel size an arm's argv sets; 1 where it sets none (the engines'
    default) or something that is not a size."""
    value = knobs.current_value(args, mechanism, engine)
    return value if type(value) is int and value >= 1 else 1


def arm_pricing(d: Design, price: Price | None) -> tuple[Pricing | None, str | None]:
    """(Pricing, None), (None, why a configured price gives no cost), or (None, None) without a price."""
    if price is None:  # no cost shown, not a zero
        return None, None
    gpu = None
    if d.deployment.launcher == "local":  # the engines run on this host: its GPUs are theirs
        gpu = read_gpus()
    units = units_for(price, gpu)
    if units is None:
        return None, ("the accelerator count is unknown (no GPU seen through NVML): set cost.accelerators, or "
                      "per: host for a CPU deployment")
    per_arm = (units.count, units.count)
    if d.mechanism in COUNT_KNOBS:  # the knob changes how many accelerators serve: each arm's own count
        engine = d.deployment.engine
        base, cand = (_multiplier(args, d.mechanism, engine) for args in (d.baseline_args, d.candidate_args))
        per_arm = (units.count, max(1, round(units.count * cand / base)))
    return Pricing(price=price, units=per_arm, units_source=units.source), None
