"""Values that rules compare, parsed from YAML into small typed objects (never eval'd text).

    {signal: ttft_p95}          a snapshot signal
    {slo: ttft_p95}             an SLO
    {param: min_rate}           a rule parameter (defaults in the rule, overridable by configuration)
    {ratio: [A, B]}             A / B
    {spread: request_rate}      max / median of a signal across replicas
    {fact: replica_count}       replica_count, gpu_count; the served model's (MODEL_FACTS);
                                what was timed on the target (MEASURED_FACTS)
    {config: enable_prefix_caching}   a configuration value the engine revealed (a string)
    0.5                         a constant
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Union

from advisor.errors import AdvisorError
from probes import Snapshot, signal_defs

FACTS = ("replica_count", "gpu_count", "kv_bytes_per_token", "gqa_ratio", "experts", "tokenization_share")
MODEL_FACTS = {"kv_bytes_per_token": "bytes", "gqa_ratio": "x", "experts": ""}
MEASURED_FACTS = {"tokenization_share": "ratio"}


class RuleSyntaxError(AdvisorError, ValueError):
    """A rule's YAML names something that does not exist, or has the wrong shape."""


@dataclass
class Bindings:
    """What an expression's names stand for while one rule is evaluated: the snapshot's signals,
    the SLOs, the rule's parameters, the served model's facts and the measured facts."""
    snapshot: Snapshot
    slo: dict[str, float | None]
    params: dict[str, float]
    model: dict[str, float | None] | None = None  # MODEL_FACTS of the served model; None: not known
    model_missing: str = "the served model's structure is not known"
    measured: dict[str, "Value"] = field(default_factory=dict)  # MEASURED_FACTS, each with its source or why missing


@dataclass
class Value:
    value: float | str | None
    missing: str | None = None
    unit: str = ""
    label: str = ""
    source: str = ""
    parts: list["Value"] = field(default_factory=list)
    bucket: tuple[float, float] | None = None  # a quantile: the histogram bucket it was interpolated in


@dataclass(frozen=True)
class Expr:
    kind: str
    arg: Any

    def label(self) -> str:
        if self.kind == "ratio":
            return f"{self.arg[0].label()} / {self.arg[1].label()}"
        if self.kind == "const":
            return f"{self.arg:g}"
        if self.kind == "spread":
            return f"spread({self.arg})"
        return f"{self.kind}:{self.arg}" if self.kind != "signal" else self.arg

    def signals(self) -> set[str]:
        if self.kind in ("signal", "spread"):
            return {self.arg}
        if self.kind == "ratio":
            return self.arg[0].signals() | self.arg[1].signals()
        return set()

    def per_replica(self) -> set[str]:
        """The signals this reads replica by replica (a spread), not in aggregate."""
        if self.kind == "spread":
            return {self.arg}
        if self.kind == "ratio":
            return self.arg[0].per_replica() | self.arg[1].per_replica()
        return set()

    def evaluate(self, ctx: Bindings) -> Value:
        snap = ctx.snapshot
        if self.kind == "const":
            return Value(float(self.arg), label=self.label())
        if self.kind == "signal":
            s = snap.signals.get(self.arg)
            if s is None:
                return Value(None, f"{self.arg} was not measured", label=self.arg)
            return Value(s.value, s.missing, s.unit, self.arg, s.source, bucket=s.bucket)
        if self.kind == "slo":
            v = ctx.slo.get(self.arg)
            return Value(v, None if v is not None else f"no {self.arg} SLO set", "", f"SLO {self.arg}", "SLO")
        if self.kind == "param":
            return Value(ctx.params[self.arg], label=f"{self.arg}", source="rule parameter")
        if self.kind == "config":
            v = snap.engine.config.get(self.arg)
            return Value(v, None if v is not None else f"the engine does not reveal {self.arg}", "",
                         self.arg, snap.engine.config_source or "")
        if self.kind == "fact" and self.arg in MODEL_FACTS:
            v = (ctx.model or {}).get(self.arg)
            return Value(v, None if v is not None else ctx.model_missing, MODEL_FACTS[self.arg], self.arg,
                         "config.json" if ctx.model else "")
        if self.kind == "fact" and self.arg in MEASURED_FACTS:
            return ctx.measured.get(self.arg) or Value(None, f"{self.arg} was not measured",
                                                       MEASURED_FACTS[self.arg], self.arg)
        if self.kind == "fact":
            # A deployment read without replica labels is still one replica.
            n = max(1, len(snap.replicas)) if self.arg == "replica_count" else len(snap.gpu.devices if snap.gpu else [])
            return Value(float(n), label=self.arg, source="snapshot")
        if self.kind == "spread":
            vals = [r.signals[self.arg].value for r in snap.replicas
                    if self.arg in r.signals and r.signals[self.arg].value is not None]
            if len(vals) < 2:
                return Value(None, f"fewer than two replicas report {self.arg}", "x", self.label())
            med = statistics.median(vals)
            if med <= 0:
                return Value(None, f"median {self.arg} across replicas is zero", "x", self.label())
            return Value(max(vals) / med, unit="x", label=self.label(), source=f"{len(vals)} replicas: max / median")
        if self.kind == "ratio":
            a, b = self.arg[0].evaluate(ctx), self.arg[1].evaluate(ctx)
            for part in (a, b):
                if part.value is None or isinstance(part.value, str):
                    return Value(None, part.missing or f"{part.label} is not a number", "x", self.label(), parts=[a, b])
            if b.value == 0:
                return Value(None, f"{b.label} is zero", "x", self.label(), parts=[a, b])
            return Value(a.value / b.value, unit="x", label=self.label(), parts=[a, b],
                         source=" / ".join(p.source for p in (a, b) if p.source))
        raise AssertionError(self.kind)


def parse_expr(raw: Any, where: str, params: dict[str, float], slo_names: set[str]) -> Expr:
    if isinstance(raw, bool):
        raise RuleSyntaxError(f"{where}: expected a number or an expression, got {raw!r}")
    if isinstance(raw, (int, float)):
        return Expr("const", float(raw))
    if not isinstance(raw, dict) or len(raw) != 1:
        raise RuleSyntaxError(f"{where}: expected one of signal/slo/param/ratio/spread/fact/config or a number, got {raw!r}")
    (kind, arg), = raw.items()
    if kind in ("signal", "spread"):
        if arg not in signal_defs():
            raise RuleSyntaxError(f"{where}: unknown signal {arg!r}")
        return Expr(kind, arg)
    if kind == "slo":
        if arg not in slo_names:
            raise RuleSyntaxError(f"{where}: unknown SLO {arg!r} (known: {', '.join(sorted(slo_names))})")
        return Expr(kind, arg)
    if kind == "param":
        if arg not in params:
            raise RuleSyntaxError(f"{where}: parameter {arg!r} is not declared under params")
        return Expr(kind, arg)
    if kind == "fact":
        if arg not in FACTS:
            raise RuleSyntaxError(f"{where}: unknown fact {arg!r} (known: {', '.join(FACTS)})")
        return Expr(kind, arg)
    if kind == "config":
        if not isinstance(arg, str):
            raise RuleSyntaxError(f"{where}: config needs a key name")
        return Expr(kind, arg)
    if kind == "ratio":
        if not isinstance(arg, list) or len(arg) != 2:
            raise RuleSyntaxError(f"{where}: ratio needs a list of two expressions")
        return Expr(kind, (parse_expr(arg[0], f"{where}.ratio[0]", params, slo_names),
                           parse_expr(arg[1], f"{where}.ratio[1]", params, slo_names)))
    raise RuleSyntaxError(f"{where}: unknown expression {kind!r}")


ExprLike = Union[Expr, None]
