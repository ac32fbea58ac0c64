"""Service-level objectives the diagnosis judges against. Defaults suit an interactive chat service."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from advisor.errors import AdvisorError
from advisor.inputs import InputModel, load_yaml, validate
from advisor.ranges import DurationS, Rate


class SLO(InputModel):
    """Every value finite and positive: `.inf` would switch an objective off, NaN would meet none."""

    ttft_p95: DurationS = Field(default=1.0, description="seconds from request to first token, 95th percentile")
    tpot_p95: DurationS = Field(default=0.1, description="seconds per output token after the first, 95th percentile")
    e2e_p99: DurationS = Field(default=30.0, description="seconds from request to last token, 99th percentile")
    error_rate: float = Field(default=0.01, ge=0, le=1, description="share of requests that end in an engine error")
    goodput_min: Rate | None = Field(default=None, description="requests per second that must meet every SLO")


class SLOError(AdvisorError, ValueError):
    pass


def load_slo(path: Path | None) -> SLO:
    """The SLO file: a mapping of SLO names to numbers, or such a mapping under a top-level `slo:`."""
    if path is None:
        return SLO()
    data, node = load_yaml(path, SLOError)
    if data is None:
        return SLO()
    if not isinstance(data, dict):
        raise SLOError(f"{path}: expected a mapping of SLO names to numbers")
    if set(data) == {"slo"} and isinstance(data["slo"], dict):
        return validate(SLO, data["slo"], path, SLOError, node, prefix=("slo",))
    return validate(SLO, data, path, SLOError, node)
