"""Signals and budgets, on the real command line against servers that never finish answering.

SIGINT and SIGTERM are acknowledged with one line and end the command within a second; a command
whose budget runs out says so and exits 2; neither leaves a traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.support.cli import ROOT
from tests.support.hostile import dribbling_server, silent_server


def start(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "advisor.cli", *args], cwd=ROOT, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


def wait_started(proc: subprocess.Popen, asked: threading.Event) -> None:
    """Past the imports, into the request (the interpreter start is not what is measured): the
    server has read the command's first request. A fixed sleep was not enough under four test
    workers on two cores, where the imports alone can take longer."""
    assert asked.wait(60), "the command sent no request within 60 s"
    assert proc.poll() is None, proc.communicate()


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
@pytest.mark.parametrize("mode", ["--prom-url", "--url"])
def test_a_signal_stops_a_waiting_probe_within_a_second(sig, code, mode):
    asked = threading.Event()
    with silent_server(asked) as url:
        proc = start("probe", mode, url, "--window", "2s", env={"ADVISOR_TIMEOUT": "30"})
        wait_started(proc, asked)
        sent = time.monotonic()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=10)
        took = time.monotonic() - sent
    assert took < 1.0, (took, err)
    assert proc.returncode == code, err
    assert "Traceback" not in err + out
    assert [line for line in err.splitlines() if "received" in line] == [f"{sig.name} received: stopping"]


def test_a_dribbling_target_ends_at_the_stated_budget():
    with dribbling_server("body") as url:
        t = time.monotonic()
        proc = start("probe", "--url", url, "--window", "1s", env={"ADVISOR_TIMEOUT": "0.5"})
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - t
    assert proc.returncode == 2, err
    assert "Traceback" not in err + out
    # Per-request deadlines end it first; the budget (1 + 6 x 0.5 + 10 s) is the backstop.
    assert took < 1 + 6 * 0.5 + 10 + 5, (took, err)
    assert len([line for line in err.splitlines() if line.startswith("error:")]) == 1, err
