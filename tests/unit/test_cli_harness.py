"""The tests' own way of running the `advisor` command (tests/support/cli.py): a command past its
timeout is interrupted first, as a user would (Ctrl-C), so that an experiment stops the engines it
started; it is killed only if it lingers past the grace."""

from __future__ import annotations

import socket
import subprocess
import time

import pytest

from tests.support.cli import INTERRUPT_GRACE_S, run_cli


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_command_past_its_timeout_is_interrupted_and_ends_on_its_own(tmp_path):
    config = tmp_path / "advisor.yaml"
    config.write_text("deployments:\n  - name: a\n    prom_url: http://127.0.0.1:9\n")
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as e:  # `serve` runs until it is stopped
        run_cli("serve", "--port", str(free_port()), "--no-schedule", "--config", str(config), timeout=3,
                data_dir=tmp_path)
    took = time.monotonic() - started
    assert took < 3 + INTERRUPT_GRACE_S / 2, f"{took:.0f} s: it waited for the kill, not for the interrupt"
    assert "SIGINT received: stopping" in e.value.stderr, e.value.stderr
