"""Signals from successive scrapes of an engine's /metrics, without Prometheus.

Histograms and counters use the first and last scrape (deltas, with counter resets handled);
gauges use every scrape in between. The definitions match the PromQL in probes/prometheus.py,
so the two probes agree on the same traffic up to bucket interpolation.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable

from probes import _replicas
from probes.catalog import Dialect, SignalDef, signal_unit, signals_for
from probes.exposition import Labels, Scrape, bucket_quantile
from probes.snapshot import INTERPOLATED, Replica, Signal

Group = tuple[tuple[str, str], ...]
NO_TRAFFIC = "no traffic in the window"


class _View:
    """Series of one dialect metric, filtered by model and label matchers, grouped by replica."""

    def __init__(self, dialect: Dialect, model: str | None, per_replica: bool):
        self.d = dialect
        self.model = model
        self.per_replica = per_replica

    def group(self, labels: Labels) -> Group:
        if not self.per_replica:
            return ()
        lab = dict(labels)
        return tuple((k, lab[k]) for k in self.d.replica_labels if k in lab)

    def keep(self, key: str, labels: Labels) -> bool:
        lab = dict(labels)
        if self.model and self.d.model_label and lab.get(self.d.model_label, self.model) != self.model:
            return False
        spec = self.d.metrics[key]
        return all(re.fullmatch(rx, lab.get(k, "")) for k, rx in spec.match.items())


def _counter_delta(v0: float | None, v1: float) -> float:
    # A value lower than before means the counter was reset (engine restart): count from zero.
    if v0 is None or v1 < v0:
        return v1
    return v1 - v0


def _deltas(view: _View, key: str, sample: str, first: Scrape, last: Scrape,
            by_series: Callable[[Labels], Labels] = lambda lab: lab) -> dict[Group, dict[Labels, float]]:
    """Per group, per series (after by_series), the counter delta between the two scrapes."""
    before = first.series(sample)
    out: dict[Group, dict[Labels, float]] = defaultdict(lambda: defaultdict(float))
    for labels, v1 in last.series(sample).items():
        if not view.keep(key, labels):
            continue
        out[view.group(labels)][by_series(labels)] += _counter_delta(before.get(labels), v1)
    return out


def _hist_reset_aware(view: _View, key: str, name: str, first: Scrape, last: Scrape) -> dict[Group, list[tuple[float, float]]]:
    """Bucket deltas summed by le within each group. A series whose _count went down was
    reset: its whole current histogram is the delta."""
    counts0, counts1 = first.series(name + "_count"), last.series(name + "_count")
    reset = {lab for lab, c in counts1.items() if lab in counts0 and c < counts0[lab]}
    before = first.series(name + "_bucket")
    out: dict[Group, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    for labels, v1 in last.series(name + "_bucket").items():
        if not view.keep(key, labels):
            continue
        lab = dict(labels)
        le = float(lab.pop("le"))
        series = tuple(sorted(lab.items()))
        v0 = None if series in reset else before.get(labels)
        out[view.group(series)][le] += _counter_delta(v0, v1)
    return {g: sorted(b.items()) for g, b in out.items()}


def _sum_over(view: _View, key: str, sample: str, first: Scrape, last: Scrape) -> dict[Group, float]:
    return {g: sum(s.values()) for g, s in _deltas(view, key, sample, first, last).items()}


def _gauge_totals(view: _View, key: str, name: str, scrapes: list[Scrape], across: str) -> dict[Group, list[float]]:
    out: dict[Group, list[float]] = defaultdict(list)
    for s in scrapes:
        per: dict[Group, list[float]] = defaultdict(list)
        for labels, v in s.series(name).items():
            if view.keep(key, labels) and math.isfinite(v):
                per[view.group(labels)].append(v)
        for g, vs in per.items():
            out[g].append(sum(vs) if across == "sum" else sum(vs) / len(vs))
    return out


def compute(dialect: Dialect, scrapes: list[Scrape], model: str | None = None,
            per_replica: bool = False) -> dict[Group, dict[str, Signal]]:
    """Every catalog signal, per replica group (or one group () for the aggregate)."""
    first, last = scrapes[0], scrapes[-1]
    window = max(last.t - first.t, 1e-9)
    available = last.names | first.names
    view = _View(dialect, model, per_replica)
    results: dict[Group, dict[str, Signal]] = defaultdict(dict)
    groups: set[Group] = set()
    raw: dict[str, dict[Group, tuple[float, str, str | None]]] = {}

    def resolve(key: str) -> str | None:
        return dialect.resolve(key, available)

    for name, sdef in signals_for(dialect).items():
        names = [resolve(o) for o in sdef.operands()]
        if None in names:
            missing = [o for o, n in zip(sdef.operands(), names) if n is None]
            wanted = " / ".join(dialect.metrics[m].names[0] for m in missing)
            raw[name] = {(): (math.nan, f"not exposed by the target ({wanted})", None)}
            continue
        vals = _evaluate(view, sdef, names, scrapes, first, last, window)
        raw[name] = vals
        groups.update(vals)

    for name, sdef in signals_for(dialect).items():
        unit = signal_unit(name)
        source = _source(sdef, dialect, resolve)
        for g in groups or {()}:
            v, why, note = raw[name].get(g, raw[name].get((), (math.nan, None, None)))
            if g not in raw[name] and () not in raw[name]:
                why = NO_TRAFFIC if sdef.op not in ("avg", "max", "share") else "no samples in the window"
            ok = math.isfinite(v)
            results[g][name] = Signal(name=name, value=v if ok else None, unit=unit, window_s=window,
                                      source=source, missing=None if ok else (why or _why_nan(sdef)), note=note)
    return dict(results)


def _why_nan(sdef: SignalDef) -> str:
    return "no samples in the window" if sdef.op in ("avg", "max", "share") else NO_TRAFFIC


def _source(sdef: SignalDef, dialect: Dialect, resolve) -> str:
    ops = ", ".join(f"{resolve(o)}" for o in sdef.operands())
    q = f" q={sdef.q:g}" if sdef.q is not None else ""
    return f"/metrics delta: {sdef.op}{q} of {ops}"


def _evaluate(view, sdef: SignalDef, names, scrapes, first, last, window) -> dict[Group, tuple[float, str | None, str | None]]:
    key = sdef.metric
    if sdef.op == "quantile":
        out = {}
        for g, buckets in _hist_reset_aware(view, key, names[0], first, last).items():
            v, note = bucket_quantile(sdef.q, buckets)
            out[g] = (v, None, note or INTERPOLATED)
        return out
    if sdef.op in ("mean", "count_rate"):
        counts = _sum_over(view, key, names[0] + "_count", first, last)
        if sdef.op == "count_rate":
            return {g: (c / window, None, None) for g, c in counts.items()}
        sums = _sum_over(view, key, names[0] + "_sum", first, last)
        return {g: (sums.get(g, 0.0) / c if c > 0 else math.nan, None, None) for g, c in counts.items()}
    if sdef.op == "rate":
        return {g: (d / window, None, None) for g, d in _sum_over(view, key, names[0], first, last).items()}
    if sdef.op == "ratio":
        num = _sum_over(view, sdef.num, names[0], first, last)
        den = _sum_over(view, sdef.den, names[1], first, last)
        return {g: (num.get(g, 0.0) / d if d > 0 else math.nan, None, None) for g, d in den.items()}
    if sdef.op in ("avg", "max"):
        series = _gauge_totals(view, key, names[0], scrapes, view.d.metrics[key].across)
        fn = max if sdef.op == "max" else (lambda xs: sum(xs) / len(xs))
        return {g: (fn(xs), None, None) for g, xs in series.items() if xs}
    if sdef.op == "share":
        used = _gauge_totals(view, sdef.num, names[0], scrapes, "sum")
        other = _gauge_totals(view, sdef.other, names[1], scrapes, "sum")
        out = {}
        for g, xs in used.items():
            u, o = sum(xs) / len(xs), sum(other.get(g, [math.nan])) / max(len(other.get(g, [])), 1)
            out[g] = (u / (u + o) if (u + o) > 0 else math.nan, None, None)
        return out
    raise AssertionError(sdef.op)


def to_replicas(groups: dict[Group, dict[str, Signal]]) -> list[Replica]:
    return _replicas.fold(groups)
