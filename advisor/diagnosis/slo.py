"""Service-level objectives the diagnosis judges against. Defaults suit an interactive chat service."""

from __future__ import annotations

from advisor.errors import AdvisorError
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError


class SLO(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ttft_p95: float = Field(default=1.0, gt=0, description="seconds from request to first token, 95th percentile")
    tpot_p95: float = Field(default=0.1, gt=0, description="seconds per output token after the first, 95th percentile")
    e2e_p99: float = Field(default=30.0, gt=0, description="seconds from request to last token, 99th percentile")
    error_rate: float = Field(default=0.01, ge=0, le=1, description="share of requests that end in an engine error")
    goodput_min: float | None = Field(default=None, gt=0, description="requests per second that must meet every SLO")


class SLOError(AdvisorError, ValueError):
    pass


def load_slo(path: Path | None) -> SLO:
    if path is None:
        return SLO()
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except OSError as e:
        raise SLOError(f"{path}: cannot read: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise SLOError(f"{path}: not valid YAML: {str(e).splitlines()[0]}") from e
    if not isinstance(data, dict):
        raise SLOError(f"{path}: expected a mapping of SLO names to numbers")
    try:
        return SLO.model_validate(data.get("slo", data))
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise SLOError(f"{path}: field {field}: {err['msg']}") from e
