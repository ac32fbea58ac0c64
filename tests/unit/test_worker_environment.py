"""The dashboard's experiment worker (advisor/app/jobs.py) gets no dashboard token, and its log is
this user's only: the first hardening round left both to the inherited environment and umask."""

from __future__ import annotations

import stat

from advisor.app import jobs
from advisor.experiments.run.session import LAUNCH_KEY_ENV


def test_the_worker_gets_the_targets_credentials_but_not_the_dashboards_token(monkeypatch):
    monkeypatch.setenv("ADVISOR_API_TOKEN", "dashboard-secret-123")
    monkeypatch.setenv("ADVISOR_API_TOKEN_FILE", "/run/secrets/token")
    monkeypatch.setenv("ADVISOR_PROM_PASSWORD", "prom-pass-456")
    env = jobs.worker_environment({"ADVISOR_DB_URL": "sqlite:///x.db"}, key="k1")
    assert "ADVISOR_API_TOKEN" not in env and "ADVISOR_API_TOKEN_FILE" not in env
    assert "dashboard-secret-123" not in env.values()
    assert env["ADVISOR_PROM_PASSWORD"] == "prom-pass-456", "it reads the target's Prometheus"
    assert env["ADVISOR_DB_URL"] == "sqlite:///x.db" and env[LAUNCH_KEY_ENV] == "k1"


def test_the_workers_log_is_0600_whatever_the_umask(tmp_path):
    import os

    old = os.umask(0o022)
    try:
        with jobs.open_log(tmp_path / "w.log") as f:
            f.write("error: x\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "w.log").stat().st_mode) == 0o600
    assert (tmp_path / "w.log").read_text() == "error: x\n"
