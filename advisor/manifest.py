"""What every number is written next to: the machine, the engine, the workload and the method."""

from __future__ import annotations

import os
import platform
from functools import lru_cache

from advisor.errors import AdvisorError
from probes.http import HttpConfig, request
from probes.http import client as http_client
from advisor import net
from probes.gpu import read_gpus


@lru_cache(maxsize=1)
def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass

    gpus = read_gpus()
    return {"cpu": cpu, "cores": os.cpu_count(), "os": f"{platform.system()} {platform.release()}",
            "python": platform.python_version(),
            "gpus": [d.name for d in gpus.devices] if gpus.available else [],
            "gpu_status": None if gpus.available else gpus.reason}


def engine_version(url: str, timeout: float = 5.0, http: HttpConfig | None = None) -> str | None:
    """The engine's /version, asked within one request deadline; None when it does not say.
    http: TLS and credentials (default: the settings' for an engine)."""

    try:
        cfg = (http or net.config("engine", url=url)).with_(timeout=timeout)
        with http_client(cfg) as c:
            r = request(c, "GET", url.rstrip("/") + "/version", what="engine")
        version = r.json().get("version") if r.status_code == 200 else None
        return str(version) if version is not None else None
    except (AdvisorError, ValueError, AttributeError):
        return None
