"""Values that cannot be are no evidence, for both probes.

A count, a duration, a queue length, a share and a power draw are never below zero, and a share
(KV-cache usage, GPU utilisation) never above its unit's whole (signals.yaml `unit_max`). A sample
of an engine's /metrics, or a row of a Prometheus answer, that says otherwise (an exporter bug, a
proxy or a hostile target) would become a request rate of -5 req/s or a KV usage of -500 %, and a
ratio of two negative counters an error rate of 1.0: the signal it feeds is missing instead, its
reason naming the series and the value, so no finding is built on it.

The rule is here once; the probes ask it where values enter: probes/_delta.py for each sample of
each scrape, probes/prometheus.py for each row of a primitive's answer, and both for the signal
computed from them (probes/_primitives.from_operands), before a Signal is built.
"""

from __future__ import annotations

import math

from probes.catalog import Dialect, MetricSpec, SignalDef, gauge_max, signal_unit, unit_max

GAUGE_OPS = ("avg", "max", "share")
_PREFIX = "impossible value, refused as evidence: "


def operand_keys(sdef: SignalDef) -> list[str]:
    """The metric (a dialect key) behind each operand, in the order from_operands takes them."""
    if sdef.op == "mean":
        return [sdef.metric, sdef.metric]
    return sdef.operands()


def limits(spec: MetricSpec, op: str | None = None, combined: bool = False) -> tuple[float | None, float | None]:
    """(lowest, highest) a reading of the metric can be; None where unbounded. combined: the reading
    is Prometheus' combination of series (a sum of rates, a gauge summed or averaged over series and
    time) under signal op `op`: a sum of shares is no share, an average of them is."""
    lo = None if spec.can_be_negative else 0.0
    hi = unit_max().get(spec.unit) if spec.type == "gauge" else None
    if hi is not None and combined and not (op in ("avg", "max") and spec.across == "avg"):
        hi = None
    if hi is None and spec.type == "gauge":
        hi = gauge_max().get(spec.unit)
    return lo, hi


def _why(spec: MetricSpec, v: float, lo: float | None, combined: bool) -> str:
    if lo is not None and v < lo:
        if combined and spec.type != "gauge":
            return f"a {spec.type}'s rate cannot be below zero"
        return f"a {spec.type} ({spec.unit}) cannot be negative"
    if spec.unit in unit_max():
        return f"a share ({spec.unit}) cannot be above {unit_max()[spec.unit]:g}"
    return f"a gauge in {spec.unit} above {gauge_max()[spec.unit]:g} is no reading of any deployment"


def check(spec: MetricSpec, series: str, v: float, op: str | None = None, combined: bool = False,
          where: str = "") -> str | None:
    """Why this reading of the metric is no evidence (naming the series, the value and `where`, e.g.
    ' in scrape 2 of 3'), or None. +Inf and -Inf are refused (no count, duration or share is
    infinite); NaN is left to the callers' 'no data' handling (an exporter's "no observation yet")."""
    if math.isinf(v):
        return f"{_PREFIX}{series} = {v:g}{where} (a {spec.type} ({spec.unit}) cannot be infinite)"
    if math.isnan(v):
        return None
    lo, hi = limits(spec, op, combined)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        return f"{_PREFIX}{series} = {v:g}{where} ({_why(spec, v, lo, combined)})"
    return None


def check_signal(name: str, sdef: SignalDef, dialect: Dialect, v: float, source: str) -> str | None:
    """Why the signal's own value is no evidence, or None: below zero (unless an operand's metric can
    be negative), above its `max`, or, for a gauge's average, maximum or share, above its unit's whole."""
    if not math.isfinite(v):
        return None
    unit = signal_unit(name)
    signed = any(dialect.metrics[k].can_be_negative for k in sdef.operands() if k in dialect.metrics)
    hi = sdef.max if sdef.max is not None else (unit_max().get(unit) if sdef.op in GAUGE_OPS else None)
    if v < 0 and not signed:
        why = "cannot be below zero"
    elif hi is not None and v > hi:
        why = f"cannot be above {hi:g}"
    else:
        return None
    return f"{_PREFIX}{name} = {v:g} {unit} from {source} ({why})"
