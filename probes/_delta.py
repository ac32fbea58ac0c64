"""Signals from successive scrapes of an engine's /metrics, without Prometheus.

Histograms and counters add up their increases from each scrape to the next, as Prometheus'
increase() does: a value lower than the one before is a reset (the engine restarted), counted from
zero, and `resets` says which series went backwards so the snapshot can note it. Gauges use every
scrape. The definitions match the PromQL in probes/prometheus.py, so the two probes agree on the
same traffic up to bucket interpolation.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Collection

from probes import _replicas, _sense
from probes._primitives import from_operands, quantile_buckets, why_empty
from probes.catalog import Dialect, SignalDef, signal_unit, signals_for
from probes.exposition import Labels, Scrape, listed, series_text
from probes.snapshot import Replica, Signal

Group = tuple[tuple[str, str], ...]


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


def _deltas(view: _View, key: str, sample: str, scrapes: list[Scrape],
            by_series: Callable[[Labels], Labels] = lambda lab: lab) -> dict[Group, dict[Labels, float]]:
    """Per group, per series (after by_series), the counter's increase over the scrapes: each
    scrape against the series' value in the last scrape that had it. A series first seen after
    the first scrape counts from zero."""
    out: dict[Group, dict[Labels, float]] = defaultdict(lambda: defaultdict(float))
    seen: dict[Labels, float] = {}
    for i, s in enumerate(scrapes):
        for labels, v1 in s.series(sample).items():
            if not view.keep(key, labels):
                continue
            if i:
                out[view.group(labels)][by_series(labels)] += _counter_delta(seen.get(labels), v1)
            seen[labels] = v1
    return out


def _hist_reset_aware(view: _View, key: str, name: str, scrapes: list[Scrape]) -> dict[Group, list[tuple[float, float]]]:
    """Bucket increases summed by le within each group. A series whose _count went down was
    reset: its whole histogram in that scrape is the increase. Buckets without a readable le
    are skipped (the scrape's problems say so)."""
    out: dict[Group, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    seen_counts: dict[Labels, float] = {}
    seen: dict[Labels, float] = {}
    for i, s in enumerate(scrapes):
        counts = s.series(name + "_count")
        reset = {lab for lab, c in counts.items() if lab in seen_counts and c < seen_counts[lab]}
        for labels, v1 in s.series(name + "_bucket").items():
            if not view.keep(key, labels):
                continue
            lab = dict(labels)
            try:
                le = float(lab.pop("le"))
            except (KeyError, ValueError):
                continue
            if math.isnan(le):
                continue
            series = tuple(sorted(lab.items()))
            if i:
                v0 = None if series in reset else seen.get(labels)
                out[view.group(series)][le] += _counter_delta(v0, v1)
            seen[labels] = v1
        seen_counts.update(counts)
    return {g: sorted(b.items()) for g, b in out.items()}


def _sum_over(view: _View, key: str, sample: str, scrapes: list[Scrape]) -> dict[Group, float]:
    return {g: sum(s.values()) for g, s in _deltas(view, key, sample, scrapes).items()}


def resets(scrapes: list[Scrape], read: Collection[str] = ()) -> list[str]:
    """The counters that went backwards from one scrape to the next (a reset: the engine
    restarted, or several processes answer on one address), as one note; [] when none did.
    read: the metric names the signals read, named first among the examples."""
    seen: dict[tuple[str, Labels], tuple[float, int]] = {}
    found: dict[tuple[str, Labels], tuple[float, float, int]] = {}
    for i, s in enumerate(scrapes):
        for name in sorted(s.names):
            if not s.is_counter(name):
                continue
            for labels, v1 in s.series(name).items():
                k = (name, labels)
                if k in seen and v1 < seen[k][0] and k not in found:
                    found[k] = (seen[k][0], v1, i)
                seen[k] = (v1, i)
    if not found:
        return []
    at = sorted({i for _, _, i in found.values()})
    # The metrics the signals read come first, and plain counters before a histogram's buckets.
    def rank(k: tuple[str, Labels]):
        hist = k[0].endswith(("_bucket", "_sum", "_count"))
        base = k[0].removesuffix("_bucket").removesuffix("_count").removesuffix("_sum")
        return (k[0] not in read and base not in read, hist, k[0], k[1])

    order = sorted(found, key=rank)
    examples = [f"{series_text(n, lab)} {found[n, lab][0]:g} -> {found[n, lab][1]:g}" for n, lab in order]
    return [f"{len(found)} counter series went backwards between scrapes (a counter reset: the engine restarted, "
            f"or more than one process answers on this address) at scrape {', '.join(str(i + 1) for i in at)} "
            f"of {len(scrapes)}: {listed(examples)}; their increase was counted from zero after the reset, "
            "as Prometheus' rate() does"]


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
    buckets: dict[str, dict[Group, tuple[float, float]]] = {}
    refused: dict[str, dict[Group, str]] = {}  # signals fed an impossible sample, per group: why
    scanned: dict[tuple[str, str], dict[Group, str]] = {}
    memo: dict[tuple, dict] = {}  # each metric's deltas, read once however many signals share them

    def resolve(key: str) -> str | None:
        return dialect.resolve(key, available)

    for name, sdef in signals_for(dialect).items():
        names = [resolve(o) for o in sdef.operands()]
        if None in names:
            missing = [o for o, n in zip(sdef.operands(), names) if n is None]
            wanted = " / ".join(dialect.metrics[m].names[0] for m in missing)
            raw[name] = {(): (math.nan, f"not exposed by the target ({wanted})", None)}
            continue
        vals, buckets[name] = _evaluate(view, sdef, names, scrapes, first, last, window, memo)
        raw[name] = vals
        refused[name] = _impossible(view, sdef, names, scrapes, scanned)
        groups.update(vals)

    for name, sdef in signals_for(dialect).items():
        unit = signal_unit(name)
        source = _source(sdef, dialect, resolve)
        for g in groups or {()}:
            v, why, note = raw[name].get(g, raw[name].get((), (math.nan, None, None)))
            bad = refused.get(name, {}).get(g) or _sense.check_signal(name, sdef, dialect, v, source)
            if bad:
                v, why, note = math.nan, bad, None
            ok = math.isfinite(v)
            results[g][name] = Signal(name=name, value=v if ok else None, unit=unit, window_s=window,
                                      source=source, missing=None if ok else (why or why_empty(sdef)), note=note,
                                      bucket=buckets.get(name, {}).get(g) if ok else None)
    return dict(results)


def _read_samples(op: str, spec, name: str) -> list[str]:
    """The sample names a signal of this op reads of one operand's metric."""
    if spec.type != "histogram":
        return [name]
    return {"quantile": [f"{name}_bucket"], "mean": [f"{name}_sum", f"{name}_count"]}.get(op, [f"{name}_count"])


def _impossible(view: _View, sdef: SignalDef, names: list[str], scrapes: list[Scrape],
                scanned: dict[tuple[str, str], dict[Group, str]]) -> dict[Group, str]:
    """Per group, why a sample the signal reads cannot be (probes/_sense.py): the first one found,
    naming its series, value and scrape. scanned: each (metric, sample name) is read once per compute."""
    out: dict[Group, str] = {}
    for key, name in zip(sdef.operands(), names):
        spec = view.d.metrics[key]
        for sample in _read_samples(sdef.op, spec, name):
            if (key, sample) not in scanned:
                found: dict[Group, str] = {}
                for i, s in enumerate(scrapes):
                    for labels, v in s.series(sample).items():
                        if not view.keep(key, labels) or view.group(labels) in found:
                            continue
                        why = _sense.check(spec, series_text(sample, labels), v,
                                           where=f" in scrape {i + 1} of {len(scrapes)}")
                        if why:
                            found[view.group(labels)] = why
                scanned[key, sample] = found
            for g, why in scanned[key, sample].items():
                out.setdefault(g, why)
    return out


def _source(sdef: SignalDef, dialect: Dialect, resolve) -> str:
    ops = ", ".join(f"{resolve(o)}" for o in sdef.operands())
    q = f" q={sdef.q:g}" if sdef.q is not None else ""
    return f"/metrics delta: {sdef.op}{q} of {ops}"


def _evaluate(view, sdef: SignalDef, names, scrapes, first, last, window, memo: dict | None = None
              ) -> tuple[dict[Group, tuple[float, str | None, str | None]], dict[Group, tuple[float, float]]]:
    """The signal's operands from the deltas (or the gauge samples), combined as the Prometheus
    probe combines its rows; and, for a quantile, the bucket each group's value lies in. memo:
    the deltas already read in this compute (p50, p95 and p99 read one histogram), by their arguments."""
    key = sdef.metric
    memo = {} if memo is None else memo

    def once(fn, metric: str, name: str, *more):
        """fn(view, metric, name, scrapes, *more), read once per memo (the caller never changes it)."""
        k = (fn, metric, name, *more)
        if k not in memo:
            memo[k] = fn(view, metric, name, scrapes, *more)
        return memo[k]

    if sdef.op == "quantile":
        operands = [once(_hist_reset_aware, key, names[0])]
    elif sdef.op == "count_rate":
        operands = [{g: c / window for g, c in once(_sum_over, key, names[0] + "_count").items()}]
    elif sdef.op == "mean":
        counts = once(_sum_over, key, names[0] + "_count")
        sums = once(_sum_over, key, names[0] + "_sum")
        operands = [{g: sums.get(g, 0.0) for g in counts}, counts]
    elif sdef.op == "rate":
        operands = [{g: d / window for g, d in once(_sum_over, key, names[0]).items()}]
    elif sdef.op == "ratio":
        # A counter with no series in a group counted nothing there.
        den = once(_sum_over, sdef.den, names[1])
        num = once(_sum_over, sdef.num, names[0])
        operands = [{g: num.get(g, 0.0) for g in den}, den]
    elif sdef.op in ("avg", "max"):
        series = once(_gauge_totals, key, names[0], view.d.metrics[key].across)
        fn = max if sdef.op == "max" else _mean
        operands = [{g: fn(xs) for g, xs in series.items() if xs}]
    elif sdef.op == "share":
        used = once(_gauge_totals, sdef.num, names[0], "sum")
        other = once(_gauge_totals, sdef.other, names[1], "sum")
        operands = [{g: _mean(xs) for g, xs in used.items()}, {g: _mean(xs) for g, xs in other.items()}]
    else:
        raise AssertionError(sdef.op)
    return ({g: (v, None, note) for g, (v, note) in from_operands(sdef, operands).items()},
            quantile_buckets(sdef, operands))


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def to_replicas(groups: dict[Group, dict[str, Signal]]) -> list[Replica]:
    return _replicas.fold(groups)


def notes(scrapes: list[Scrape], dialect: Dialect | None = None) -> list[str]:
    """What the snapshot should say about its scrapes: each exposition problem once (with how many
    scrapes had it), then the counter resets between them (the dialect's metrics named first)."""
    seen: dict[str, int] = {}
    for s in scrapes:
        for p in s.problems:
            seen[p] = seen.get(p, 0) + 1
    out = [p if n == len(scrapes) else f"{p} (in {n} of {len(scrapes)} scrapes)" for p, n in seen.items()]
    read = {n for spec in dialect.metrics.values() for n in spec.names} if dialect else set()
    return out + resets(scrapes, read)
