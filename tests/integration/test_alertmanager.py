"""A real Alertmanager (Debian's prometheus-alertmanager) routing an alert to `advisor serve`'s
webhook with its Bearer token: one diagnosis of the deployment the alert names is stored, however
often Alertmanager repeats the notification. The diagnosis reads a real Prometheus holding two
weeks of backfilled history (tests/weekly/two-weeks.yaml, as the weekly report's tests do)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import pytest
import yaml

from advisor.store import open_store
from tests.integration.test_weekly_report import WINDOW, prom  # noqa: F401 - the fixture
from tests.support.servers import ROOT, free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
TOKEN = "am-t0ken"


def wait_for(fn, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(0.25)
    pytest.fail(f"timed out waiting for {what}")


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_alertmanager_calls_the_advisor_and_a_repeated_notification_diagnoses_once(prom, tmp_path):  # noqa: F811
    db = f"sqlite:///{tmp_path / 'advisor.db'}"
    (tmp_path / "advisor.yaml").write_text(yaml.safe_dump({
        "deployments": [{"name": "local", "prom_url": prom.url, "window": WINDOW}],
        "alertmanager": {"min_interval": "10m"}}))
    port, am_port = free_port(), free_port()
    env = {**os.environ, "ADVISOR_API_TOKEN": TOKEN, "ADVISOR_DB_URL": db, "ADVISOR_DATA_DIR": str(tmp_path / "data")}
    serve_log = open(tmp_path / "serve.log", "w")
    serve = subprocess.Popen([sys.executable, "-m", "advisor.cli", "serve", "--config", str(tmp_path / "advisor.yaml"),
                              "--port", str(port)], cwd=ROOT, env=env, stdout=serve_log, stderr=subprocess.STDOUT)
    # Alertmanager's own receiver and route: the webhook with the same token every action needs;
    # a notification repeated every 2 s, so the advisor sees it many times within the test.
    (tmp_path / "am.yml").write_text(yaml.safe_dump({
        "route": {"receiver": "advisor", "group_by": ["alertname", "deployment"], "group_wait": "1s",
                  "group_interval": "1s", "repeat_interval": "2s"},
        "receivers": [{"name": "advisor", "webhook_configs": [{
            "url": f"http://127.0.0.1:{port}/api/alertmanager", "send_resolved": True,
            "http_config": {"authorization": {"type": "Bearer", "credentials": TOKEN}}}]}]}))
    am_log = open(tmp_path / "am.log", "w")
    am = subprocess.Popen(["prometheus-alertmanager", f"--config.file={tmp_path / 'am.yml'}",
                           f"--storage.path={tmp_path / 'am-data'}", f"--web.listen-address=127.0.0.1:{am_port}",
                           "--cluster.listen-address="], stdout=am_log, stderr=subprocess.STDOUT)
    am_url = f"http://127.0.0.1:{am_port}"
    try:
        wait_for(lambda: answers(f"http://127.0.0.1:{port}/api/deployments"), 90, "advisor serve")
        wait_for(lambda: answers(f"{am_url}/-/ready"), 60, "alertmanager")
        for labels in (["deployment=local"], ["deployment=elsewhere"]):
            add = subprocess.run(["amtool", "alert", "add", "ADV001", *labels, "severity=critical",
                                  "--annotation=summary=TTFT high", f"--alertmanager.url={am_url}"],
                                 capture_output=True, text=True, timeout=30)
            assert add.returncode == 0, add.stdout + add.stderr

        def stored() -> list:
            with open_store(db) as store:
                return store.list_diagnoses(deployment="local", limit=10)

        first = wait_for(stored, 120, "the alert's diagnosis in the store")
        log = lambda: (tmp_path / "serve.log").read_text()  # noqa: E731
        # Alertmanager repeats the group every 2 s: each repeat within the interval is dropped.
        wait_for(lambda: log().count("alertmanager: dropped") >= 3, 60, "repeated notifications")
        assert len(stored()) == 1 == len(first), "one diagnosis however often Alertmanager notifies"
        assert "advisor.yaml names no deployment 'elsewhere'" in log(), log()[-3000:]
        assert [s.deployment for s in first] == ["local"]
    finally:
        for p in (am, serve):
            p.terminate()
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        serve_log.close()
        am_log.close()
