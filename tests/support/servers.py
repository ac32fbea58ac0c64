"""Start the fake OpenAI server as a real process on a free port (for unit tests of our logic)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listener(port: int) -> int | None:
    """The pid serving a local TCP port, if any (the top-most of those sharing its socket)."""
    from advisor.experiments.arms.processes import UNSEEN, holder

    rec = holder(port)
    return None if rec is None or rec is UNSEEN else rec.pid


def argv_on(port: int) -> list[str]:
    """The command line of the process serving a local TCP port."""
    import psutil

    return psutil.Process(listener(port)).cmdline()


def flag(argv: list[str], name: str) -> str | None:
    """The value after `name` in an argv, or None when it is absent."""
    return argv[argv.index(name) + 1] if name in argv else None


def fake_argv(port: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tests.support.fake_openai", "--port", str(port), *extra]


def wait_healthy(url: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"fake server at {url} never became healthy")


@contextmanager
def fake_server(*extra: str):
    port = free_port()
    proc = subprocess.Popen(fake_argv(port, *extra), cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
