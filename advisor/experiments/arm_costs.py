"""Each arm's cost per output token at the experiment's load (advisor/cost.py), with the accelerator
count each arm holds: the same on both arms, except where the knob itself changes it (tensor and
data parallel), read off each arm's own argv."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from advisor.cost import ExperimentCost, Price
    from advisor.experiments.design import Design
    from advisor.experiments.result import ExperimentResult

_COUNT_FLAGS = {"tensor_parallel": ("--tensor-parallel-size", "-tp", "--tp-size", "--tp", "--num-shard"),
                "data_parallel": ("--data-parallel-size", "-dp", "--dp-size", "--dp")}


def _flag_int(argv: list[str], flags: tuple[str, ...]) -> int:
    for i, a in enumerate(argv):
        name, _, inline = a.partition("=")
        if name in flags:
            try:
                return max(1, int(inline or argv[i + 1]))
            except (ValueError, IndexError):
                return 1
    return 1


def arm_costs(d: Design, result: ExperimentResult, price: Price | None) -> tuple[ExperimentCost | None, str | None]:
    """(ExperimentCost, None) or (None, why not): both arms' cost per output token at this load."""
    from advisor.cost import experiment_cost, units_for

    if price is None:  # no cost shown, not a zero
        return None, None
    by_block = getattr(result, "_by_block", None)
    if not by_block:
        return None, "no valid block to read throughput from"
    gpu = None
    if d.deployment.launcher == "local":  # the engines run on this host: its GPUs are theirs
        from probes.gpu import read_gpus

        gpu = read_gpus()
    units = units_for(price, gpu)
    if units is None:
        return None, ("the accelerator count is unknown (no GPU seen through NVML): set cost.accelerators, or "
                      "per: host for a CPU deployment")
    per_arm = (units.count, units.count)
    flags = _COUNT_FLAGS.get(d.mechanism)
    if flags:  # the knob changes how many accelerators serve: each arm's own count
        base, cand = _flag_int(d.baseline_args, flags), _flag_int(d.candidate_args, flags)
        per_arm = (units.count, max(1, round(units.count * cand / base)))
    alpha = 1 - result.metrics[0].level if result.metrics else 0.05
    return experiment_cost(by_block, price, per_arm, units.source, alpha=alpha), None
