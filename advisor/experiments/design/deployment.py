"""A deployment spec: how the target engine is launched (or where its arms already run). It is
also the configuration the diagnosis knows about."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from advisor.cost import PriceSpec
from advisor.errors import AdvisorError
from advisor.inputs import InputModel, load_model
from advisor.ranges import PORT_MAX, DurationS, Port, TimeoutS, check_duration, url_port
from probes.http import redact_url


class DeploymentError(AdvisorError, ValueError):
    pass


class _Strict(InputModel):
    """Unknown keys and non-finite numbers refused; a file is validated strictly (advisor/inputs.py)."""


class LocalSpec(_Strict):
    command: list[str] = Field(min_length=1, description="argv of the engine, without the knob flags")
    args: list[str] = Field(default_factory=list, description="baseline arguments")
    env: dict[str, str] = Field(default_factory=dict)
    host: str = "127.0.0.1"
    port: Port
    candidate_port: Port | None = Field(default=None, description="parallel arms: where the candidate serves")
    arms: Literal["sequential", "parallel"] = Field(
        default="sequential",
        description="sequential: the candidate replaces the baseline on its port between blocks (one GPU); "
                    "parallel: the candidate runs beside it on candidate_port (room for both)")
    baseline_port: Port | None = Field(
        default=None,
        description="parallel arms: a fresh baseline replica serves here, started from command, args and env "
                    "exactly as the candidate is (same launcher, placement, warmup), and is compared with the "
                    "candidate instead of the long-running process on port, which is then never measured nor "
                    "touched: no warm caches, earlier traffic or outside requests of its own make the arms unlike")
    replicas: int = Field(
        default=1, ge=1, le=64,
        description="the baseline's engine replicas: one per port from `port` up (port, port+1, ...), each with "
                    "the same command and args. The replicas knob's candidate runs N+1 on candidate_port up (and a "
                    "fresh baseline replica's N on baseline_port up); the advisor's client spreads each arm's "
                    "requests over its replicas, to the one with the fewest in flight")
    health_path: str = "/health"
    start_timeout_s: TimeoutS = 300.0
    port_flag: str = "--port"
    isolate_engine_core: bool = Field(
        default=False,
        description="after each start, put the engine's unpinned processes (vLLM's CPU engine core) on its "
                    "pinned worker's cores and the API server on the others: on small CPU-only hosts an "
                    "unpinned engine core starves the API server. Both arms get the same placement")
    owns_process: bool = Field(
        default=False,
        description="the advisor owns the process found serving `port`: it may stop that process (after "
                    "journalling its pid, create time and command line) and restart the baseline from command, "
                    "args and env in its place, e.g. a baseline it is allowed to replace. Needed by arms: "
                    "sequential when the port is already served. False: the advisor never signals a process it "
                    "did not start, and refuses an experiment that would have to")

    @field_validator("command", mode="before")
    @classmethod
    def _program(cls, v):
        # One string is no argv, and a first word with spaces would be looked for as one program of
        # that whole name ("python -m vllm"): say so, and how to write it.
        if isinstance(v, str):
            program, rest = v, []
        elif isinstance(v, list) and v and isinstance(v[0], str) and len(v[0].split()) > 1:
            program, rest = v[0], v[1:]
        else:
            return v
        found = shutil.which(program)
        if found and not isinstance(v, str):
            return v  # a program whose path holds a space
        words = [program] if found else _split(program)
        shown = "[" + ", ".join(_flow(str(w)) for w in [*words, *rest]) + "]" if words else "[program, arg, ...]"
        if found or len(program.split()) < 2:
            raise ValueError(f"give the command as a list: {shown}")
        raise ValueError(f"program {program!r} not found; give the command as a list: {shown}")

    @model_validator(mode="after")
    def _ports(self):
        if self.arms == "parallel" and not self.candidate_port:
            raise ValueError("arms: parallel needs candidate_port")
        if self.candidate_port == self.port:
            raise ValueError("candidate_port must differ from port")
        if self.replicas > 1 and self.arms != "parallel":
            raise ValueError("replicas above 1 need arms: parallel (sequential arms would take the other replicas' "
                             "ports)")
        if self.baseline_port is not None:
            if self.arms != "parallel":
                raise ValueError("baseline_port needs arms: parallel (the replica runs beside the candidate)")
            if self.baseline_port in (self.port, self.candidate_port):
                raise ValueError("baseline_port must differ from port and candidate_port")
        for name in ("port", "candidate_port", "baseline_port"):
            first = getattr(self, name)
            if first is not None and first + self.replicas - 1 > PORT_MAX:
                raise ValueError(f"{name} {first} with replicas {self.replicas} runs past port {PORT_MAX} (each "
                                 f"replica takes the next port)")
        return self


def _split(words: str) -> list[str]:
    try:
        return shlex.split(words)
    except ValueError:  # an unclosed quote
        return words.split()


def _flow(word: str) -> str:
    # A word as a YAML flow list writes it: quoted unless plain.
    return word if re.fullmatch(r"[A-Za-z0-9_./=+~-]+", word) else json.dumps(word)


class EndpointsSpec(_Strict):
    baseline: str
    candidate: str
    health_path: str = "/health"

    _ports = field_validator("baseline", "candidate")(lambda v: url_port(v))


_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"


class KubernetesSpec(_Strict):
    """Where the target runs on Kubernetes and how the advisor reaches its arms (DESIGN 12): the
    arms are two fresh workloads cloned from `workload`, which is only read."""

    workload: str = Field(description="the target: deployment/NAME or statefulset/NAME")
    namespace: str = Field(default="default", description="the target's namespace (the arms are created there)")
    container: str = Field(description="the engine container's name in the pod template")
    port: Port = Field(description="the port the engine container serves on")
    reach: Literal["pod-ip", "pods-proxy"] = Field(
        default="pod-ip",
        description="how the advisor reaches an arm: pod-ip (it runs in the cluster, or on a network that routes "
                    "pod IPs), or pods-proxy (through the API server's pods proxy, with the kubeconfig's "
                    "credentials: from outside the cluster; every request crosses the API server, and an engine "
                    "started with --api-key cannot be reached this way)")
    kubeconfig: str | None = Field(default=None, description="default: the in-cluster service account, then "
                                   "$KUBECONFIG, then ~/.kube/config")
    context: str | None = Field(default=None, description="a context of the kubeconfig (default: its current one)")
    url: str | None = Field(default=None, description="where the target serves for the advisor (its Service), to "
                            "read what the engine reveals and its /metrics in a diagnosis; optional")
    health_path: str = "/health"
    start_timeout_s: TimeoutS = Field(default=900.0, description="how long an arm may take to be ready (image pull, "
                                      "model load)")
    api_timeout_s: TimeoutS = 15.0

    @field_validator("workload")
    @classmethod
    def _workload(cls, v: str) -> str:
        kind, _, name = v.partition("/")
        if kind.lower() not in ("deployment", "statefulset") or not re.fullmatch(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*", name):
            raise ValueError(f"give the target as deployment/NAME or statefulset/NAME, got {v!r} (a KServe "
                             "InferenceService or a LeaderWorkerSet: name the Deployment it runs as)")
        return f"{kind.lower()}/{name}"

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str) -> str:
        if not re.fullmatch(_DNS_LABEL, v) or len(v) > 63:
            raise ValueError(f"not a namespace name: {v!r}")
        return v

    @field_validator("url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        return None if v is None else url_port(v)

    @property
    def kind(self) -> str:
        return self.workload.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.workload.split("/", 1)[1]


class GuardrailsSpec(_Strict):
    """Per-deployment experiment guardrails; the command line's --max-duration, --max-requests and
    --max-error-rate override each."""

    max_duration: DurationS | None = Field(default=None, description="abort past this long: 30m, 1h, or seconds")
    max_requests: int | None = Field(default=None, ge=1, description="abort before a block would pass this many requests")
    max_error_rate: float | None = Field(default=None, ge=0, le=1, description="abort a block above this share of failed requests")

    @field_validator("max_duration", mode="before")
    @classmethod
    def _duration(cls, v):
        if isinstance(v, str):
            from advisor.units import parse_duration

            return check_duration(parse_duration(v), v)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v <= 0:
            raise ValueError(f"must be above 0, got {v}")
        return v

    @property
    def max_duration_s(self) -> float | None:
        return self.max_duration


class Deployment(_Strict):
    name: str
    engine: Literal["vllm", "sglang", "tgi", "llamacpp"]
    model: str = Field(description="served model name")
    launcher: Literal["local", "endpoints", "kubernetes"]
    local: LocalSpec | None = None
    endpoints: EndpointsSpec | None = None
    kubernetes: KubernetesSpec | None = None
    prometheus: str | None = Field(default=None, description="Prometheus that scrapes the target, if any")
    guardrails: GuardrailsSpec | None = Field(default=None, description="experiment guardrails for this target")
    cost: PriceSpec | None = Field(default=None, description="price per accelerator-hour (or host-hour): "
                                   "cost per million output tokens in diagnoses and experiments")

    @field_validator("prometheus")
    @classmethod
    def _prometheus_port(cls, v: str | None) -> str | None:
        return None if v is None else url_port(v)

    @model_validator(mode="after")
    def _launcher_section(self):
        if self.launcher == "local" and not self.local:
            raise ValueError("launcher local needs a local: section")
        if self.launcher == "endpoints" and not self.endpoints:
            raise ValueError("launcher endpoints needs an endpoints: section")
        if self.launcher == "kubernetes" and not self.kubernetes:
            raise ValueError("launcher kubernetes needs a kubernetes: section")
        return self

    @property
    def target_url(self) -> str:
        if self.local:
            return f"http://{self.local.host}:{self.local.port}"
        if self.kubernetes:
            k = self.kubernetes
            return redact_url(k.url.rstrip("/")) if k.url else f"k8s://{k.namespace}/{k.workload}"
        # Shown and used to name the journal's folder: never with the URL's credentials.
        return redact_url(self.endpoints.baseline.rstrip("/"))

    @property
    def baseline_url(self) -> str:
        """Where the baseline serves, credentials included: for requests, never for showing."""
        if self.local:
            return self.target_url
        if self.kubernetes:
            return (self.kubernetes.url or self.target_url).rstrip("/")
        return self.endpoints.baseline.rstrip("/")

    @property
    def key(self) -> str:
        """One lock and journal per target."""
        if self.kubernetes:
            k = self.kubernetes
            return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"k8s_{k.context or ''}_{k.namespace}_{k.workload}")
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", self.target_url.split("://", 1)[-1])


def _expand(text: str) -> str:
    # ${VAR} and ~ only: values are expanded by us, never by a shell.
    env = {"ADVISOR_HOME": str(Path.home() / ".cache" / "llm-advisor"), **os.environ}
    return os.path.expanduser(re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), m.group(0)), text))


def _scalar_text(v):
    # YAML reads `--max-num-seqs 2` and `VAR: 1` as numbers; argv and the environment are text.
    # Anything else (a bool, a mapping) is left for validation to refuse with its line.
    return _expand(str(v)) if isinstance(v, (str, int, float)) and not isinstance(v, bool) else v


def _expand_local(raw: dict) -> dict:
    local = raw.get("local")
    if not isinstance(local, dict):
        return raw
    local = dict(local)
    for k in ("command", "args"):
        if isinstance(local.get(k), list):
            local[k] = [_scalar_text(a) for a in local[k]]
    if isinstance(local.get("env"), dict):
        local["env"] = {k: _scalar_text(v) for k, v in local["env"].items()}
    return {**raw, "local": local}


def load_deployment(path: Path) -> Deployment:
    """The deployment file, validated strictly; every error one line naming the file and field."""
    return load_model(path, Deployment, DeploymentError, prepare=_expand_local)
