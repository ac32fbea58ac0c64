"""The typed result of probing a deployment: every signal with its unit, window, source and,
where it has no value, the reason why."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

INTERPOLATED = "interpolated from histogram buckets"
# Why a signal whose metrics exist has no value (Signal.missing): a counter or histogram counted
# nothing in the window, or a gauge had no samples in it.
NO_TRAFFIC = "no traffic in the window"
NO_SAMPLES = "no samples in the window"


class Signal(BaseModel):
    name: str
    value: float | None = None
    unit: str
    window_s: float | None = None
    source: str = Field(description="the PromQL query, metric or API call that produced the value")
    missing: str | None = Field(default=None, description="why there is no value, when there is none")
    note: str | None = Field(default=None, description="caveats, e.g. interpolated from coarse buckets")
    bucket: tuple[float, float] | None = Field(default=None, description="a quantile: the (lower, upper) bounds "
                                               "of the histogram bucket it was interpolated in")

    @field_validator("value")
    @classmethod
    def _finite_only(cls, v: float | None) -> float | None:
        # NaN and Inf never travel as values: the producer turns them into a missing reason.
        if v is not None and not math.isfinite(v):
            raise ValueError("signal values must be finite; record a missing reason instead")
        return v

    @property
    def present(self) -> bool:
        return self.value is not None


class Replica(BaseModel):
    """One replica (pod / instance / engine rank) and its own signals."""

    labels: dict[str, str]
    signals: dict[str, Signal] = {}

    @property
    def key(self) -> str:
        return ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()) if v) or "default"


class EngineInfo(BaseModel):
    kind: str | None = None
    version: str | None = None
    models: list[str] = []
    roots: list[str] = Field(default=[], description="what each served model was loaded from (/v1/models root)")
    max_model_len: int | None = None
    generation: str | None = Field(default=None, description="vLLM's engine generation (V1) where the metrics "
                                   "show it and the version is not read")
    config: dict[str, Any] = Field(default_factory=dict, description="configuration the engine reveals")
    config_source: str | None = None
    problems: list[str] = []


class GpuDevice(BaseModel):
    index: int
    name: str | None = None
    uuid: str | None = None
    labels: dict[str, str] = {}
    signals: dict[str, Signal] = {}


class GpuStatus(BaseModel):
    available: bool
    source: str
    reason: str | None = None
    devices: list[GpuDevice] = []


class Snapshot(BaseModel):
    target: str
    via: Literal["prometheus", "engine"]
    taken_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))
    window_s: float
    model: str | None = None
    engine: EngineInfo = Field(default_factory=EngineInfo)
    signals: dict[str, Signal] = {}
    replicas: list[Replica] = []
    gpu: GpuStatus | None = None
    queries: int = Field(default=0, description="requests made to the data source")
    problems: list[str] = Field(default_factory=list, description="what went wrong while probing")

    def value(self, name: str) -> float | None:
        sig = self.signals.get(name)
        return sig.value if sig else None

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)
