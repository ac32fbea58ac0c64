"""Signals computed locally from their operands, for both probes: from the rows of the Prometheus
probe's primitives (probes/_promql.py) and from the engine scrape's deltas (probes/_delta.py), the way
Prometheus evaluates the signal's single expression: `a / b` matches groups one to one, an empty
operand gives no result, and quantiles are histogram_quantile over the summed bucket rates
(probes.exposition.bucket_quantile, which also says when a quantile lies in the +Inf bucket)."""

from __future__ import annotations

import math
from collections import defaultdict
from functools import cached_property

from probes._promql import SignalPlan
from probes.catalog import SignalDef
from probes.exposition import bucket_quantile
from probes.snapshot import INTERPOLATED

Group = tuple[tuple[str, str], ...]
Rows = list[dict]
GAUGE_OPS = ("avg", "max", "share")


def why_empty(op: str) -> str:
    """Why a signal whose metrics exist has no value: gauges had no samples, counters and
    histograms counted nothing."""
    return "no samples in the window" if op in GAUGE_OPS else "no traffic in the window"


def group_key(labels: dict[str, str], by: list[str] | None) -> Group:
    """The replica a row belongs to (() for the aggregate). Prometheus drops empty labels, so do we."""
    return tuple((k, labels[k]) for k in by or () if labels.get(k))


def value_of(row: dict) -> float:
    try:
        return float(row["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return math.nan


class Answer:
    """One primitive's result rows, read per group (each read once, however many signals share it)."""

    def __init__(self, rows: Rows, by: list[str] | None):
        self.rows, self.by = rows, by

    @cached_property
    def values(self) -> dict[Group, float]:
        return {group_key(r.get("metric", {}), self.by): value_of(r) for r in self.rows}

    @cached_property
    def buckets(self) -> dict[Group, list[tuple[float, float]]]:
        """Per group, the (le, rate) pairs; buckets with the same bound are summed, as Prometheus
        does, and rows without a readable `le` are skipped, as Prometheus does."""
        out: dict[Group, dict[float, float]] = defaultdict(lambda: defaultdict(float))
        for r in self.rows:
            lab = r.get("metric", {})
            try:
                le = float(lab["le"])
            except (KeyError, ValueError):
                continue
            out[group_key(lab, self.by)][le] += value_of(r)
        return {g: sorted(b.items()) for g, b in out.items()}


def _div(a: float, b: float) -> float:
    if b == 0:
        return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a)
    return a / b


def compute(plan: SignalPlan, answers: list[Answer]) -> dict[Group, tuple[float, str | None]]:
    """(value, note) per group for one signal, from the answers to plan.prims (in order).
    A group absent from the result had no series; NaN means series without data (no traffic)."""
    quantile = plan.sdef.op == "quantile"
    return from_operands(plan.sdef, [a.buckets if quantile else a.values for a in answers])


def from_operands(sdef: SignalDef, operands: list[dict]) -> dict[Group, tuple[float, str | None]]:
    """One signal from its operands per group: (le, count) pairs for a quantile, one number per
    group otherwise (a rate, a gauge's average or maximum, a sum and a count). Both probes end here,
    so a signal means the same from Prometheus and from an engine's own /metrics."""
    if sdef.op == "quantile":
        out = {}
        for g, b in operands[0].items():
            v, note = bucket_quantile(sdef.q, b)
            out[g] = (v, note or INTERPOLATED)
        return out
    if sdef.op in ("count_rate", "rate", "avg", "max"):
        return {g: (v, None) for g, v in operands[0].items()}
    if sdef.op in ("mean", "ratio"):
        num, den = operands
        return {g: (_div(v, den[g]), None) for g, v in num.items() if g in den}
    if sdef.op == "share":
        used, other = operands
        return {g: (_div(v, v + other[g]), None) for g, v in used.items() if g in other}
    raise AssertionError(sdef.op)
