"""POST /api/alertmanager: Alertmanager's webhook into `advisor serve`. The diagnosis it starts is
the diagnose service's (here recorded, not run: tests/integration/test_alertmanager.py runs it
from a real Alertmanager against a real Prometheus)."""

from __future__ import annotations

import threading

import pytest
from fastapi.testclient import TestClient

from advisor.app.alerts_in import AlertIntake, AmNotification
from advisor.web import alerts, create_app
from tests.unit.test_web import AUTH, TOKEN, config


def note(*alerts_: dict, group: str = '{}:{alertname="ADV001"}') -> dict:
    return {"version": "4", "groupKey": group, "status": "firing", "receiver": "advisor",
            "externalURL": "http://alertmanager:9093", "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
            "truncatedAlerts": 0,
            "alerts": [{"status": "firing", "labels": {"alertname": "ADV001", **a}, "annotations": {},
                        "startsAt": "2026-12-05T12:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
                        "generatorURL": "http://prometheus:9090/graph", "fingerprint": "f1"} for a in alerts_]}


@pytest.fixture
def started(monkeypatch):
    calls: list[str] = []
    done = threading.Event()

    def fake(ctx, name, group, trigger=None):
        calls.append(name)
        done.set()
    monkeypatch.setattr(alerts, "_diagnose", fake)
    return calls, done


def client(tmp_path) -> TestClient:
    app = create_app(config(tmp_path), store_url=f"sqlite:///{tmp_path / 'a.db'}", token=TOKEN,
                     log_dir=tmp_path / "logs")
    return TestClient(app, raise_server_exceptions=False, base_url="http://127.0.0.1")


def test_a_firing_alert_for_a_watched_deployment_starts_one_diagnosis(tmp_path, started):
    calls, done = started
    with client(tmp_path) as c:
        r = c.post("/api/alertmanager", json=note({"deployment": "local"}), headers=AUTH)
        assert r.status_code == 202 and r.json()["started"] == ["local"], r.text
        assert done.wait(10) and calls == ["local"]


def test_without_the_token_it_is_401_and_nothing_starts(tmp_path, started):
    with client(tmp_path) as c:
        r = c.post("/api/alertmanager", json=note({"deployment": "local"}))
    assert r.status_code == 401 and started[0] == []


@pytest.mark.parametrize("body", [b"not json", b'{"alerts": "x"}', b'{"version": "4", "groupKey": "g", "status": "x", '
                                  b'"alerts": []}', b"[]"])
def test_a_body_that_is_not_alertmanager_s_is_400_in_one_line(tmp_path, started, body):
    with client(tmp_path) as c:
        r = c.post("/api/alertmanager", content=body, headers={**AUTH, "Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    assert "not an Alertmanager webhook notification" in r.json()["detail"] and "\n" not in r.json()["detail"]
    assert started[0] == []


def test_an_unknown_deployment_is_202_with_the_reason(tmp_path, started):
    with client(tmp_path) as c:
        r = c.post("/api/alertmanager", json=note({"deployment": "nope"}, {"job": "x"}), headers=AUTH)
    assert r.status_code == 202
    unknown = r.json()["unknown"]
    assert unknown[0] == {"deployment": "nope", "why": "advisor.yaml names no deployment 'nope'"}
    assert unknown[1]["why"] == "the alert 'ADV001' has no 'deployment' label"
    assert started[0] == []


def test_a_flood_of_notifications_is_one_diagnosis_per_deployment_per_interval(tmp_path, started, caplog):
    calls, _ = started
    with client(tmp_path) as c, caplog.at_level("INFO", logger="advisor.alertmanager"):
        codes = {c.post("/api/alertmanager", json=note({"deployment": "local"}), headers=AUTH).status_code
                 for _ in range(1000)}
        last = c.post("/api/alertmanager", json=note({"deployment": "local"}), headers=AUTH).json()
    assert codes == {202}
    assert calls == ["local"], len(calls)
    assert last["dropped_total"] == 1000 and "at most one per 600 s" in last["dropped"][0]["why"]
    assert sum("alertmanager: dropped" in rec.message for rec in caplog.records) == 1000


def test_the_interval_passes_and_the_next_alert_diagnoses_again(tmp_path):
    now = [0.0]
    intake = AlertIntake(clock=lambda: now[0])
    cfg = config(tmp_path)
    n = AmNotification.model_validate(note({"deployment": "local"}))
    assert intake.receive(n, cfg).started == ["local"]
    now[0] = 599
    assert intake.receive(n, cfg).started == []
    now[0] = 601
    assert intake.receive(n, cfg).started == ["local"]
    resolved = AmNotification.model_validate({**note({"deployment": "local"}), "status": "resolved",
                                              "alerts": [{**note({"deployment": "local"})["alerts"][0],
                                                          "status": "resolved"}]})
    now[0] = 2000
    got = intake.receive(resolved, cfg)
    assert got.started == [] and got.resolved == 1


def test_findings_are_posted_renewed_and_ended_when_a_later_diagnosis_no_longer_finds_them(tmp_path):
    from datetime import datetime, timezone

    from advisor.app.alerts_out import AlertsOut
    from advisor.fleet.config import FleetConfig
    from tests.unit.test_store import make_diagnosis

    cfg = FleetConfig.model_validate({"deployments": [{"name": "local", "prom_url": "http://127.0.0.1:9"}],
                                      "alertmanager": {"url": "http://am:9093", "dashboard_url": "http://adv:8080/",
                                                       "ttl": "30m"}})
    out, w = AlertsOut(cfg), cfg.deployments[0]
    t0 = datetime(2026, 12, 5, 12, 0, tzinfo=timezone.utc)
    first = out.alerts_for(w, make_diagnosis(findings=2), 7, now=t0)
    assert [(a["labels"]["rule"], a["labels"]["severity"], a["endsAt"]) for a in first] == \
        [("queueing", "severe", "2026-12-05T12:30:00Z"), ("kv_pressure", "moderate", "2026-12-05T12:30:00Z")]
    assert first[0]["generatorURL"] == first[0]["annotations"]["diagnosis"] == "http://adv:8080/diagnoses/7"
    assert first[0]["labels"]["source"] == "llm-advisor" and first[0]["labels"]["deployment"] == "local"
    t1 = datetime(2026, 12, 5, 12, 10, tzinfo=timezone.utc)
    later = out.alerts_for(w, make_diagnosis(findings=1), 8, now=t1)
    assert [(a["labels"]["rule"], a["endsAt"]) for a in later] == \
        [("queueing", "2026-12-05T12:40:00Z"), ("kv_pressure", "2026-12-05T12:10:00Z")], "renewed; ended now"
    assert out.alerts_for(w, make_diagnosis(findings=0), 9, now=t1)[0]["endsAt"] == "2026-12-05T12:10:00Z"


def test_the_advisor_s_own_findings_routed_back_start_nothing(tmp_path):
    intake = AlertIntake()
    n = AmNotification.model_validate(note({"deployment": "local", "source": "llm-advisor"}))
    got = intake.receive(n, config(tmp_path))
    assert got.started == [] and got.own == 1


def test_annotations_for_grafana_list_diagnoses_and_experiments_in_time_order(tmp_path):
    from tests.unit.test_web import hostile_store

    url = hostile_store(tmp_path, "<b>x</b>")
    app = create_app(config(tmp_path), store_url=url, token=TOKEN, log_dir=tmp_path / "logs")
    with TestClient(app, base_url="http://127.0.0.1") as c:
        rows = c.get("/api/deployments/local/annotations").json()
        assert c.get("/api/deployments/nope/annotations").status_code == 404
    kinds = [r["tags"][1] for r in rows]
    assert "diagnosis" in kinds and all(set(r) == {"time", "title", "text", "tags"} for r in rows), rows
    assert [r["time"] for r in rows] == sorted(r["time"] for r in rows) and all(r["time"] > 1.5e12 for r in rows)
    assert any(r["title"].startswith("diagnosis 1: ") for r in rows)


def test_a_diagnosis_an_alert_started_links_back_to_it_escaped_in_html_and_markdown():
    from advisor.diagnosis.model import Trigger
    from advisor.reports import html, markdown
    from advisor.reports.views import diagnosis_view
    from tests.unit.test_store import make_diagnosis

    d = make_diagnosis()
    d.trigger = Trigger(source="alertmanager", alerts=["ADV001", "<script>x</script>"], group_key="g",
                        url='http://am:9093/#/alerts?filter=%7Bdeployment%3D%22local%22%7D')
    page = html.render("diagnosis.html.j2", d=diagnosis_view(d))
    assert 'Started by an Alertmanager notification: ADV001, &lt;script&gt;x&lt;/script&gt; firing' in page
    assert '<a href="http://am:9093/#/alerts?filter=%7Bdeployment%3D%22local%22%7D"' in page
    assert "<script>x" not in page
    md = markdown.diagnosis(d, [])
    line = next(x for x in md.splitlines() if x.startswith("Started by"))
    assert line.startswith("Started by an Alertmanager notification: ADV001, &lt;script>x&lt;/script> firing (http://am"), line
    d.trigger.url = "javascript:alert(1)"
    assert "javascript:" not in html.render("diagnosis.html.j2", d=diagnosis_view(d))
