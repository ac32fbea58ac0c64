"""PromQL for the Prometheus probe: rate first, then sum by le; never an average of quantiles.

Signals are not queried one by one. Each signal reads one or two *primitives*, per-operand
expressions that several signals share (ttft p50/p95/p99 read one bucket-rate primitive, a mean
and a count rate share `_sum`/`_count` rates); the probe fetches every primitive a dialect needs
in one query, each tagged with PART_LABEL and OR-ed together, and computes the signals locally
(probes/_primitives.py). A signal's `source` is the single PromQL expression, built from the very
primitive strings, that gives the same value when pasted into Prometheus.
"""

from __future__ import annotations

from dataclasses import dataclass

from probes.catalog import Dialect, InfoSpec, SignalDef

PART_LABEL = "__advisor_part"


def selector(dialect: Dialect, key: str, model: str | None) -> str:
    spec = dialect.metrics[key]
    parts = []
    if model and dialect.model_label:
        parts.append(f'{dialect.model_label}="{_escape(model)}"')
    parts += [f'{k}=~"{_escape(v)}"' for k, v in sorted(spec.match.items())]
    return "{" + ",".join(parts) + "}" if parts else ""


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"')


def duration(seconds: float) -> str:
    return f"{round(seconds)}s"


def _by(by: list[str] | None) -> str:
    return f" by ({', '.join(by)})" if by else ""


@dataclass(frozen=True)
class Primitive:
    """One expression the probe fetches. `kind` says how its rows are read: `buckets` rows carry
    an `le` label; every other kind has one value per group."""

    kind: str
    expr: str


@dataclass(frozen=True)
class SignalPlan:
    """How one signal is computed: its definition, the primitives it reads (in the order the
    computation expects them) and the equivalent single PromQL expression (its source)."""

    name: str
    sdef: SignalDef
    prims: tuple[Primitive, ...]
    source: str


def bucket_rates(name: str, sel: str, w: str, by: list[str] | None = None) -> Primitive:
    le = ", ".join(["le", *(by or [])])
    return Primitive("buckets", f"sum by ({le}) (rate({name}_bucket{sel}[{w}]))")


def summed_rate(sample: str, sel: str, w: str, by: list[str] | None = None) -> Primitive:
    return Primitive("value", f"sum{_by(by)} (rate({sample}{sel}[{w}]))")


def gauge_over_time(fn: str, across: str, name: str, sel: str, w: str, step: str,
                    by: list[str] | None = None) -> Primitive:
    """avg or max over the window of the per-instant total (sum, or avg for ratios) of a gauge."""
    return Primitive("value", f"{fn}_over_time(({across}{_by(by)} ({name}{sel}))[{w}:{step}])")


def series_avg(name: str, sel: str, w: str, by: list[str] | None = None) -> Primitive:
    """Each series' average over the window, summed."""
    return Primitive("value", f"sum{_by(by)} (avg_over_time({name}{sel}[{w}]))")


def plan_signal(name: str, sdef: SignalDef, dialect: Dialect, names: list[str], model: str | None,
                window_s: float, by: list[str] | None = None) -> SignalPlan:
    """The primitives one signal reads; `names` are the resolved metric names of its operands
    and `by` breaks every primitive down per replica."""
    w = duration(window_s)
    sels = [selector(dialect, k, model) for k in sdef.operands()]
    n, s = names[0], sels[0]
    if sdef.op == "quantile":
        b = bucket_rates(n, s, w, by)
        return SignalPlan(name, sdef, (b,), f"histogram_quantile({sdef.q:g}, {b.expr})")
    if sdef.op == "mean":
        total, count = summed_rate(f"{n}_sum", s, w, by), summed_rate(f"{n}_count", s, w, by)
        return SignalPlan(name, sdef, (total, count), f"{total.expr} / {count.expr}")
    if sdef.op == "count_rate":
        count = summed_rate(f"{n}_count", s, w, by)
        return SignalPlan(name, sdef, (count,), count.expr)
    if sdef.op == "rate":
        r = summed_rate(n, s, w, by)
        return SignalPlan(name, sdef, (r,), r.expr)
    if sdef.op == "ratio":
        num, den = summed_rate(n, s, w, by), summed_rate(names[1], sels[1], w, by)
        return SignalPlan(name, sdef, (num, den), f"{num.expr} / {den.expr}")
    if sdef.op in ("avg", "max"):
        step = duration(max(1.0, window_s / 20))
        g = gauge_over_time(sdef.op, dialect.metrics[sdef.metric].across, n, s, w, step, by)
        return SignalPlan(name, sdef, (g,), g.expr)
    if sdef.op == "share":
        used, other = series_avg(n, s, w, by), series_avg(names[1], sels[1], w, by)
        return SignalPlan(name, sdef, (used, other), f"{used.expr} / ({used.expr} + {other.expr})")
    raise AssertionError(sdef.op)


def primitives(plans: list[SignalPlan]) -> list[Primitive]:
    """The distinct primitives that the plans read, in first-use order."""
    return list(dict.fromkeys(p for plan in plans for p in plan.prims))


def models_expr(dialect: Dialect, window_s: float) -> Primitive:
    """One row per model that served in the window (the model label of the engine's detect metric)."""
    return Primitive("rows", f"count by ({dialect.model_label}) "
                             f"(last_over_time({dialect.detect[0]}[{duration(window_s)}]))")


def info_expr(dialect: Dialect, spec: InfoSpec, model: str | None, window_s: float) -> Primitive:
    """An info metric's latest series (its labels are the configuration)."""
    sel = f'{{{dialect.model_label}="{_escape(model)}"}}' if model and dialect.model_label else ""
    return Primitive("rows", f"last_over_time({spec.names[0]}{sel}[{duration(window_s)}])")


def tag(expr: str, part: str) -> str:
    """The expression with every result row labelled PART_LABEL=part."""
    return f'label_replace({expr}, "{PART_LABEL}", "{_escape(part)}", "", "")'


def combine(parts: list[tuple[str, str]]) -> str:
    """One instant query returning the rows of every (part id, expression): each tagged, OR-ed.
    The tags keep label sets distinct, so `or` drops nothing. The `or`s nest as a balanced tree:
    Prometheus hashes both sides of every `or`, so a flat chain `a or b or c ...` would hash the
    first parts' rows once per later part (at 64 replicas that made the per-replica query 1.6x slower)."""
    if not parts:
        raise ValueError("nothing to combine")
    if len({p for p, _ in parts}) != len(parts):
        raise ValueError("part ids must be distinct")
    return _or_tree([tag(expr, part) for part, expr in parts])


def _or_tree(terms: list[str]) -> str:
    if len(terms) == 1:
        return terms[0]
    mid = (len(terms) + 1) // 2
    left, right = _or_tree(terms[:mid]), _or_tree(terms[mid:])
    return f"{_group(left, mid)} or {_group(right, len(terms) - mid)}"


def _group(expr: str, terms: int) -> str:
    return f"({expr})" if terms > 1 else expr
