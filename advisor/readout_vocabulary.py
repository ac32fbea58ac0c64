"""The one readout vocabulary: the (metric, statistic) pairs the knob catalog may name
(advisor/knobs/catalog.yaml `readouts`), a Design reads, and the experiments measure and judge
(advisor/experiments/design/readouts.py says what each one is and computes it from a block's requests).

Names only, importing nothing: the knob catalog, below the experiments, reads it too.
"""

from __future__ import annotations

REQUEST_STATISTICS = ("p50", "p95", "p99", "mean")
REQUEST_METRICS = ("ttft", "tpot", "itl", "e2e", "urgent_ttft", "urgent_e2e")
URGENT = {"urgent_ttft": "ttft", "urgent_e2e": "e2e"}
BLOCK_READOUTS: dict[str, str] = {
    "output_tokens": "per_s", "throughput": "per_s", "goodput": "per_s", "errors": "ratio",
}
# Measured by a rate search over both arms, not per block (advisor/experiments/design/capacity.py):
# the highest arrival rate at which every SLO holds, requests per second.
SEARCH_READOUTS: dict[str, str] = {"capacity": "per_s"}
HIGHER_IS_BETTER = frozenset({"output_tokens", "throughput", "goodput", "capacity"})

# metric -> the statistics the judge knows for it
VOCABULARY: dict[str, tuple[str, ...]] = {
    **{m: REQUEST_STATISTICS for m in REQUEST_METRICS},
    **{m: (s,) for m, s in BLOCK_READOUTS.items()},
    **{m: (s,) for m, s in SEARCH_READOUTS.items()},
}


def known(metric: str, statistic: str) -> bool:
    return statistic in VOCABULARY.get(metric, ())


def is_block_readout(metric: str, statistic: str) -> bool:
    return BLOCK_READOUTS.get(metric) == statistic


def lower_is_better(metric: str) -> bool:
    return metric not in HIGHER_IS_BETTER


def names() -> list[str]:
    return [f"{m} {s}" for m, stats in VOCABULARY.items() for s in stats]
