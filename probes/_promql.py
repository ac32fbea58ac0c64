"""PromQL for each signal definition: rate first, then sum by le; never an average of quantiles."""

from __future__ import annotations

from probes.catalog import Dialect, SignalDef


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
    return f"{int(round(seconds))}s"


def build(sdef: SignalDef, dialect: Dialect, names: list[str], model: str | None,
          window_s: float, by: list[str] | None = None) -> str:
    """One instant query for a signal; `by` breaks it down per replica."""
    w = duration(window_s)
    grp = f" by ({', '.join(by)})" if by else ""
    agg = f"sum{grp}"
    ops = sdef.operands()
    sels = [selector(dialect, k, model) for k in ops]
    n, s = names[0], sels[0]
    if sdef.op == "quantile":
        le = ", ".join(["le", *(by or [])])
        return f"histogram_quantile({sdef.q:g}, sum by ({le}) (rate({n}_bucket{s}[{w}])))"
    if sdef.op == "mean":
        return f"{agg} (rate({n}_sum{s}[{w}])) / {agg} (rate({n}_count{s}[{w}]))"
    if sdef.op == "count_rate":
        return f"{agg} (rate({n}_count{s}[{w}]))"
    if sdef.op == "rate":
        return f"{agg} (rate({n}{s}[{w}]))"
    if sdef.op == "ratio":
        return f"{agg} (rate({n}{s}[{w}])) / {agg} (rate({names[1]}{sels[1]}[{w}]))"
    if sdef.op in ("avg", "max"):
        across = f"{dialect.metrics[sdef.metric].across}{grp}"
        step = duration(max(1.0, window_s / 20))
        return f"{sdef.op}_over_time(({across} ({n}{s}))[{w}:{step}])"
    if sdef.op == "share":
        used = f"{agg} (avg_over_time({n}{s}[{w}]))"
        other = f"{agg} (avg_over_time({names[1]}{sels[1]}[{w}]))"
        return f"{used} / ({used} + {other})"
    raise AssertionError(sdef.op)
