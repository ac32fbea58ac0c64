"""An engine process on this host, as the local launcher (advisor/experiments/arms/local.py) and the
demo stack (advisor/localstack/engine.py) run it: started detached with its own log
(children.spawn), waited for until it answers its health path or exits, stopped with its process
group (children.stop). What each adds (a journal, an ownership mark, the tiny model's command line)
stays with it.
"""

from __future__ import annotations

import subprocess
import time
from collections import deque
from os import PathLike
from typing import Literal

from advisor import child_env, net
from probes.errors import ProbeError
from probes.http import BadUrl, TlsError, client, request

# An engine answers /health within this once it listens; a start polls it this often (a refused
# connection costs a millisecond; at 1 s every start waited half a second on average for nothing).
HEALTH_TIMEOUT_S = 2.0
HEALTH_POLL_S = 0.25

Started = Literal["healthy", "exited", "late"]


def healthy(url: str, path: str = "/health", timeout: float = 5.0) -> bool:
    """Whether url+path answers 200 within `timeout` in all (connect, headers and body). An
    untrusted TLS certificate or a bad URL is raised (one line): waiting longer cannot fix it."""
    try:
        with client(net.config("engine", timeout=timeout, url=url)) as c:
            return request(c, "GET", url.rstrip("/") + path, what="engine").status_code == 200
    except (TlsError, BadUrl):
        raise
    except ProbeError:  # unreachable, too slow, an endless body
        return False


def wait_healthy(proc: subprocess.Popen, url: str, path: str = "/health", timeout: float = 240.0) -> Started:
    """Until the engine started as `proc` answers url+path ("healthy"), exits ("exited": its code is
    proc.returncode), or `timeout` seconds pass ("late"; it is left running, for the caller to stop)."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            return "exited"
        if healthy(url, path, timeout=HEALTH_TIMEOUT_S):
            return "healthy"
        if time.monotonic() > deadline:
            return "late"
        time.sleep(HEALTH_POLL_S)


def log_tail(path: PathLike | str | None, n: int) -> list[str] | None:
    """The log's last n lines, as quoted in an error: the advisor's secrets and URL credentials
    redacted. None when there is no log to read."""
    if path is None:
        return None
    try:
        with open(path, errors="replace") as f:
            return [child_env.redact(line.rstrip("\n")) for line in deque(f, maxlen=n)]
    except OSError:
        return None
