"""A deployment spec: how the target engine is launched (or where its arms already run). It is
also the configuration the diagnosis knows about."""

from __future__ import annotations

from advisor.errors import AdvisorError
import os
import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class DeploymentError(AdvisorError, ValueError):
    pass


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LocalSpec(_Strict):
    command: list[str] = Field(min_length=1, description="argv of the engine, without the knob flags")
    args: list[str] = Field(default_factory=list, description="baseline arguments")
    env: dict[str, str] = Field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = Field(ge=1, le=65535)
    candidate_port: int | None = Field(default=None, description="parallel arms: where the candidate serves")
    arms: Literal["sequential", "parallel"] = Field(
        default="sequential",
        description="sequential: the candidate replaces the baseline on its port between blocks (one GPU); "
                    "parallel: the candidate runs beside it on candidate_port (room for both)")
    health_path: str = "/health"
    start_timeout_s: float = 300.0
    port_flag: str = "--port"
    isolate_engine_core: bool = Field(
        default=False,
        description="after each start, put the engine's unpinned processes (vLLM's CPU engine core) on its "
                    "pinned worker's cores and the API server on the others: on small CPU-only hosts an "
                    "unpinned engine core starves the API server. Both arms get the same placement")

    @model_validator(mode="after")
    def _ports(self):
        if self.arms == "parallel" and not self.candidate_port:
            raise ValueError("arms: parallel needs candidate_port")
        if self.candidate_port == self.port:
            raise ValueError("candidate_port must differ from port")
        return self


class EndpointsSpec(_Strict):
    baseline: str
    candidate: str
    health_path: str = "/health"


class Deployment(_Strict):
    name: str
    engine: Literal["vllm", "sglang", "tgi", "llamacpp"]
    model: str = Field(description="served model name")
    launcher: Literal["local", "endpoints"]
    local: LocalSpec | None = None
    endpoints: EndpointsSpec | None = None
    prometheus: str | None = Field(default=None, description="Prometheus that scrapes the target, if any")

    @model_validator(mode="after")
    def _launcher_section(self):
        if self.launcher == "local" and not self.local:
            raise ValueError("launcher local needs a local: section")
        if self.launcher == "endpoints" and not self.endpoints:
            raise ValueError("launcher endpoints needs an endpoints: section")
        return self

    @property
    def target_url(self) -> str:
        if self.local:
            return f"http://{self.local.host}:{self.local.port}"
        return self.endpoints.baseline.rstrip("/")

    @property
    def key(self) -> str:
        """One lock and journal per target."""
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", self.target_url.split("://", 1)[-1])


def _expand(text: str) -> str:
    # ${VAR} and ~ only: values are expanded by us, never by a shell.
    env = {"ADVISOR_HOME": str(Path.home() / ".cache" / "llm-advisor"), **os.environ}
    return os.path.expanduser(re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), m.group(0)), text))


def load_deployment(path: Path) -> Deployment:
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as e:
        raise DeploymentError(f"{path}: cannot read: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise DeploymentError(f"{path}: not valid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(raw, dict):
        raise DeploymentError(f"{path}: expected a mapping at the top level")
    local = raw.get("local")
    if isinstance(local, dict):
        for k in ("command", "args"):
            if isinstance(local.get(k), list):
                local[k] = [_expand(str(a)) for a in local[k]]
        if isinstance(local.get("env"), dict):
            local["env"] = {k: _expand(str(v)) for k, v in local["env"].items()}
    try:
        return Deployment.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise DeploymentError(f"{path}: field {field}: {err['msg']}") from None
