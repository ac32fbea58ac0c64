"""A real Alertmanager (Debian's prometheus-alertmanager) routing an alert to `advisor serve`'s
webhook with its Bearer token: one diagnosis of the deployment the alert names is stored, however
often Alertmanager repeats the notification; the diagnosis' findings are posted back to the same
Alertmanager, where `amtool alert query` shows them with a link to the diagnosis and an `amtool`
silence silences them. The diagnosis reads a real Prometheus holding two weeks of backfilled
history (tests/weekly/two-weeks.yaml, as the weekly report's tests do: TTFT past its SLO lately)."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest
import yaml

from advisor.store import open_store
from tests.integration.test_weekly_report import WINDOW, prom  # noqa: F401 - the fixture
from tests.support import alertmanager
from tests.support.alertmanager import answers, wait_for
from tests.support.servers import ROOT, free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
TOKEN = "am-t0ken"


def test_alertmanager_calls_the_advisor_and_a_repeated_notification_diagnoses_once(prom, tmp_path):  # noqa: F811
    db = f"sqlite:///{tmp_path / 'advisor.db'}"
    port, am_port = free_port(), free_port()
    (tmp_path / "advisor.yaml").write_text(yaml.safe_dump({
        "deployments": [{"name": "local", "prom_url": prom.url, "window": WINDOW}],
        "alertmanager": {"min_interval": "10m", "url": f"http://127.0.0.1:{am_port}",
                         "dashboard_url": "http://advisor.example:8080"}}))
    env = {**os.environ, "ADVISOR_API_TOKEN": TOKEN, "ADVISOR_DB_URL": db, "ADVISOR_DATA_DIR": str(tmp_path / "data")}
    serve_log = open(tmp_path / "serve.log", "w")
    serve = subprocess.Popen([sys.executable, "-m", "advisor.cli", "serve", "--config", str(tmp_path / "advisor.yaml"),
                              "--port", str(port)], cwd=ROOT, env=env, stdout=serve_log, stderr=subprocess.STDOUT)
    # Alertmanager's own receiver and route: the webhook with the same token every action needs;
    # a notification repeated every 2 s, so the advisor sees it many times within the test.
    am = alertmanager.start(tmp_path, am_port, f"http://127.0.0.1:{port}/api/alertmanager", TOKEN,
                            group_interval="1s", repeat_interval="2s", send_resolved=True)
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
        # The diagnosis says what started it, and its page links back to the alerts in Alertmanager.
        with open_store(db) as store:
            trigger = store.get_diagnosis(first[0].id).trigger
        assert trigger is not None and trigger.alerts == ["ADV001"] and trigger.url.startswith(am_url), trigger
        page = httpx.get(f"http://127.0.0.1:{port}/diagnoses/{first[0].id}", timeout=30).text
        assert "Started by an Alertmanager notification: ADV001 firing" in page and f'href="{am_url}' in page

        # Out: the diagnosis' findings, as Alertmanager holds them.
        def query(*args: str) -> list[dict]:
            return alertmanager.query(am_url, "alertname=LLMAdvisorFinding", "deployment=local", *args)

        posted = wait_for(query, 60, "the advisor's findings in Alertmanager")
        with open_store(db) as store:
            d = store.get_diagnosis(first[0].id)
        assert {a["labels"]["rule"] for a in posted} == {f.rule_id for f in d.findings}, (posted, d.findings)
        assert all(a["annotations"]["diagnosis"] == f"http://advisor.example:8080/diagnoses/{first[0].id}"
                   and a["labels"]["source"] == "llm-advisor" for a in posted), posted
        sil = subprocess.run(["amtool", "silence", "add", "alertname=LLMAdvisorFinding", "deployment=local",
                              "--comment=known, being fixed", "--author=sre", f"--alertmanager.url={am_url}"],
                             capture_output=True, text=True, timeout=30)
        assert sil.returncode == 0, sil.stdout + sil.stderr
        wait_for(lambda: not query(), 30, "the silence to take the findings off the active list")
        assert query("--silenced"), "silenced, not gone"
        # The route sends the advisor's own findings back to it too: never a reason for another diagnosis.
        assert len(stored()) == 1
    finally:
        for p in (am, serve):
            p.terminate()
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        serve_log.close()
