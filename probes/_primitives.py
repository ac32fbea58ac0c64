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
from probes.errors import ProbeError
from probes.exposition import bucket_bounds, bucket_quantile, listed
from probes.snapshot import INTERPOLATED, NO_SAMPLES, NO_TRAFFIC

Group = tuple[tuple[str, str], ...]
Rows = list[dict]
GAUGE_OPS = ("avg", "max", "share")


def why_empty(sdef: SignalDef) -> str:
    """Why a signal whose metrics exist has no value: gauges had no samples, counters and
    histograms counted nothing. A ratio whose denominator alone counted nothing says so: requests
    may well have flowed (a prefix-cache hit rate has no lookups to divide by while caching is off),
    and "no traffic" would then be false."""
    if sdef.op == "ratio" and sdef.den:
        return f"no {sdef.den.replace('_', ' ')} counted in the window, so no ratio"
    return NO_SAMPLES if sdef.op in GAUGE_OPS else NO_TRAFFIC


def group_key(labels: dict[str, str], by: list[str] | None) -> Group:
    """The replica a row belongs to (() for the aggregate). Prometheus drops empty labels, so do we."""
    return tuple((k, labels[k]) for k in by or () if labels.get(k))


def checked_rows(result: object, server: str, what: str) -> tuple[Rows, list[str]]:
    """An instant query's `data.result` as rows the probe can read, and notes.

    ProbeError unless it is an instant vector: a list of {"metric": {label: text}, "value": [time,
    "number"]}; a server answering otherwise is not Prometheus. Two rows with the same label sets
    (empty labels dropped, as Prometheus does) are the same series twice, which Prometheus never
    returns in one answer (a proxy merging two sources might): the first is kept and a note says so.
    A counter reset needs no note here: rate() and increase() in the queries already count it."""
    def bad(why: str) -> ProbeError:
        return ProbeError(f"{server} does not answer like a Prometheus server: {why}")

    if not isinstance(result, list):
        raise bad(f"data.result is {type(result).__name__}, not a vector of series")
    rows: Rows = []
    seen: set[Group] = set()
    repeats: list[str] = []
    for i, r in enumerate(result):
        if not isinstance(r, dict):
            raise bad(f"series {i + 1} is {type(r).__name__}, not an object")
        metric = r.get("metric", {})
        if not isinstance(metric, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metric.items()):
            raise bad(f"series {i + 1} has labels that are not text")
        value = r.get("value")
        if not (isinstance(value, list) and len(value) == 2 and isinstance(value[1], str) and _number(value[1])):
            raise bad(f"series {i + 1} has no [time, \"number\"] value")
        key = tuple(sorted((k, v) for k, v in metric.items() if v))
        if key in seen:
            repeats.append("{" + ",".join(f'{k}="{v[:60]}"' for k, v in key) + "}")
            continue
        seen.add(key)
        rows.append(r)
    notes = []
    if repeats:
        shown = what if len(what) <= 120 else what[:120] + "..."
        notes.append(f"Prometheus returned the same series more than once in one answer ({len(repeats)} repeats: "
                     f"{listed(sorted(set(repeats)))}) to {shown}; the first of each was used")
    return rows, notes


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


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


def quantile_buckets(sdef: SignalDef, operands: list[dict]) -> dict[Group, tuple[float, float]]:
    """For a quantile signal, the histogram bucket each group's value was interpolated in: a value
    compared with a threshold inside that bucket could lie on either side of it."""
    if sdef.op != "quantile":
        return {}
    out = {}
    for g, b in operands[0].items():
        bounds = bucket_bounds(sdef.q, b)
        if bounds is not None:
            out[g] = bounds
    return out


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
