"""What every number is written next to: the machine, the engine, the workload and the method."""

from __future__ import annotations

import os
import platform
from functools import lru_cache

import httpx


@lru_cache(maxsize=1)
def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    from probes.gpu import read_gpus

    gpus = read_gpus()
    return {"cpu": cpu, "cores": os.cpu_count(), "os": f"{platform.system()} {platform.release()}",
            "python": platform.python_version(),
            "gpus": [d.name for d in gpus.devices] if gpus.available else [],
            "gpu_status": None if gpus.available else gpus.reason}


def engine_version(url: str, timeout: float = 5.0) -> str | None:
    try:
        r = httpx.get(url.rstrip("/") + "/version", timeout=timeout)
        return r.json().get("version") if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
