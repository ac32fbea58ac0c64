"""The weekly report, the schedule and the dashboard's diagnosis action on a real Prometheus
backfilled with 14 days of history (tests/weekly/two-weeks.yaml, written by promtool)."""

from __future__ import annotations

import io
import json
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from advisor.fleet.config import FleetConfig
from advisor.schedule import Scheduler
from advisor.app.weekly import weekly_report, weekly_view
from advisor.localstack import LocalPrometheus, backfill
from advisor.store import open_store
from advisor.web import create_app
from tests.scenarios import generate as gen
from tests.unit.test_store import make_diagnosis

# One worker runs the whole module (scripts/test.sh: --dist loadfile), so its server starts once.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

SCENARIO = Path(__file__).parents[1] / "weekly" / "two-weeks.yaml"
TOKEN = "t0ken"
# The history's steps are 30 min apart and it ends up to 35 min before the fixture starts
# (tests/scenarios/generate.py), so a 1 h window held one step, not the two rate() needs, whenever
# the fixture started in the last minutes before a half hour (CI's run at 00:27 UTC): 2 h always
# holds two.
WINDOW = "2h"


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    scn = gen.load(SCENARIO)
    out = io.StringIO()
    gen.write(gen.build(scn), scn.timestamps, out)
    data = tmp_path_factory.mktemp("weekly") / "data"
    backfill(out.getvalue(), data)
    server = LocalPrometheus([], data_dir=data).start()
    yield server
    server.stop()


def fleet(prom_url: str, **weekly) -> FleetConfig:
    doc = {"deployments": [{"name": "local", "prom_url": prom_url}]}
    if weekly:
        doc["weekly_report"] = weekly
    return FleetConfig.model_validate(doc)


def backdate(store, diagnosis_id: int, days: float) -> None:
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE diagnoses SET created_at = :t WHERE id = :i"),
                     {"t": (datetime.now(timezone.utc) - timedelta(days=days)).replace(tzinfo=None), "i": diagnosis_id})


def test_weekly_report_over_two_weeks_of_history(prom, tmp_path):
    with open_store(f"sqlite:///{tmp_path / 'a.db'}") as store:
        # Last week: queueing and KV pressure; this week: queueing only.
        backdate(store, store.save_diagnosis(make_diagnosis(findings=2), deployment="local"), 10)
        backdate(store, store.save_diagnosis(make_diagnosis(findings=1), deployment="local"), 1)
        view = weekly_view(fleet(prom.url), store)
        page = weekly_report(fleet(prom.url), store, "html")
        md = weekly_report(fleet(prom.url), store, "markdown")
    [w] = view.deployments
    assert w.problems == []
    for label in ("TTFT", "TPOT", "E2E"):
        for q in ("p50", "p95", "p99"):
            assert len(w.daily[label][q]) == 7 and all(v is not None for v in w.daily[label][q]), (label, q)
            assert len(w.previous[label][q]) == 7 and all(v is not None for v in w.previous[label][q]), (label, q)
    # TTFT rose past the 1 s SLO for the last 3 days: p95 in the 1-2.5 s bucket then, below 0.5 s before.
    assert all(v < 0.5 for v in w.daily["TTFT"]["p95"][:3]) and all(v > 1.0 for v in w.daily["TTFT"]["p95"][-3:])
    assert all(v < 0.5 for v in w.previous["TTFT"]["p95"])
    slo = {s.name: s for s in w.slo}
    assert slo["ttft_p95"].hours >= 160 and 0.50 < slo["ttft_p95"].held / slo["ttft_p95"].hours < 0.62
    assert slo["tpot_p95"].attainment == "100.0 %"
    drift = {d.name: d for d in w.drift}
    assert drift["prompt tokens p50"].flagged and float(drift["prompt tokens p50"].ratio) > 1.8
    assert not drift["requests/s"].flagged
    assert w.persisted == ["queueing TTFT high"] and w.disappeared == ["kv_pressure preemptions"]
    assert "try max_num_seqs" in w.next_change and w.proven.startswith("not proven")
    assert page.count("<svg") == 3 and "<script" not in page.lower()
    assert "SLO attainment" in md and "<svg" not in md


def test_weekly_report_names_a_prometheus_that_is_down(tmp_path):
    with open_store(f"sqlite:///{tmp_path / 'a.db'}") as store:
        [w] = weekly_view(fleet("http://127.0.0.1:9"), store).deployments
    assert len(w.problems) == 1 and "127.0.0.1:9" in w.problems[0]


class Receiver(BaseHTTPRequestHandler):
    bodies: list[dict] = []

    def do_POST(self):  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Receiver.bodies.append(json.loads(body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_schedule_diagnoses_records_failures_and_posts_the_weekly_report(prom, tmp_path):
    server = HTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"sqlite:///{tmp_path / 'a.db'}"
    try:
        doc = {"deployments": [{"name": "local", "prom_url": prom.url, "diagnose_every": "1m", "window": WINDOW},
                               {"name": "down", "prom_url": "http://127.0.0.1:9", "diagnose_every": "1m"}],
               "weekly_report": {"cron": "0 8 * * MON", "out_dir": str(tmp_path / "reports"),
                                 "webhook": f"http://127.0.0.1:{server.server_port}/hook/SECRET"}}
        cfg = FleetConfig.model_validate(doc)
        one, two = Scheduler(cfg, url, owner="one"), Scheduler(cfg, url, owner="two")
        monday = datetime(2026, 11, 30, 8, 0, 30, tzinfo=timezone.utc)
        one.started = two.started = monday - timedelta(minutes=5)
        first = {o.job: o for o in one.run_due(monday)}
        assert two.run_due(monday) == [], "a second advisor on the same database runs nothing twice"
        assert first["diagnose:local"].ok and first["diagnose:local"].detail.startswith("diagnosis ")
        assert not first["diagnose:down"].ok and "127.0.0.1:9" in first["diagnose:down"].detail
        assert first["weekly-report"].ok, first["weekly-report"].detail
        assert sorted(p.suffix for p in (tmp_path / "reports").iterdir()) == [".html", ".md"]
        assert len(Receiver.bodies) == 1 and "Weekly report" in Receiver.bodies[0]["text"]
        # The next interval: the failed deployment is tried again; the weekly report is not repeated.
        later = {o.job: o for o in one.run_due(monday + timedelta(minutes=1))}
        assert set(later) == {"diagnose:local", "diagnose:down"}
        with open_store(url) as store:
            runs = store.list_job_runs("diagnose:down")
            assert [r.ok for r in runs] == [False, False] and all(r.owner == "one" for r in runs)
            assert len(store.list_diagnoses(deployment="local")) == 2
        # Prometheus back for "down": point it at the live one, and the next slot succeeds.
        cfg.deployments[1].prom_url = prom.url
        cfg.deployments[1].window = WINDOW
        again = {o.job: o for o in one.run_due(monday + timedelta(minutes=2))}
        assert again["diagnose:down"].ok
    finally:
        server.shutdown()


def test_dashboard_runs_a_diagnosis_against_the_real_prometheus(prom, tmp_path):
    cfg = FleetConfig.model_validate({"deployments": [{"name": "local", "prom_url": prom.url, "window": WINDOW}]})
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with TestClient(create_app(cfg, store_url=url, token=TOKEN, log_dir=tmp_path), base_url="http://127.0.0.1") as c:
        r = c.post("/api/deployments/local/diagnoses", headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 202, r.text
        ident = r.json()["id"]
        listed = c.get("/api/deployments/local/diagnoses").json()
        assert listed[0]["id"] == ident and listed[0]["ttft_p95"] is not None
        page = c.get(f"/diagnoses/{ident}").text
        assert "Checks, in the order to make them" in page, "TTFT is past its SLO in the last hours"
        weekly = c.get("/reports/weekly?deployment=local")
        assert weekly.status_code == 200 and weekly.text.count("<svg") == 3
        assert "<svg" in c.get("/").text, "the fleet page's sparkline"


class _Near(float):
    def __eq__(self, other):
        return isinstance(other, float) and abs(self - other) <= 0.01 * max(abs(self), abs(other))

    __hash__ = float.__hash__


def _what_was_found(d) -> dict:
    """A stored diagnosis less when it was taken: what any front door must agree on."""
    def num(v):
        # Each door asks Prometheus at its own instant, seconds apart: rate() over 30-min samples
        # extrapolates to the window's edges, so a rate moves in its fourth digit. Two digits are
        # what a reader compares; a value on a rounding edge would still differ, so 1 % is allowed.
        return _Near(v) if isinstance(v, float) else v

    return {
        "window_s": d.window_s, "slo": d.slo, "engine": d.engine.model_dump(),
        "findings": [(f.rule_id, f.severity, [(e.signal, num(e.value)) for e in f.evidence]) for f in d.findings],
        "checks": [(c.rank, c.rule_id, c.id, c.mechanism, num(c.score), c.already) for c in d.checks],
        "not_evaluated": sorted(n.rule_id for n in d.not_evaluated),
        "cost": {k: num(v) for k, v in d.cost.model_dump().items()} if d.cost else d.cost_note,
    }


def test_every_front_door_stores_the_same_diagnosis(prom, tmp_path):
    """The command line (a real `advisor diagnose` process), the dashboard's API and the schedule
    diagnose one watched deployment through the one service: the three stored diagnoses agree."""
    from tests.support.cli import run_cli

    url = f"sqlite:///{tmp_path / 'a.db'}"
    r = run_cli("diagnose", "--prom-url", prom.url, "--window", WINDOW, "--save", "--output", "json",
                env={"ADVISOR_DB_URL": url}, timeout=120)
    assert r.code == 1, r.stderr[-2000:]  # TTFT is past its SLO: exit 1, and saved
    cfg = FleetConfig.model_validate({"deployments": [{"name": "local", "prom_url": prom.url, "window": WINDOW,
                                                       "diagnose_every": "1m"}]})
    with TestClient(create_app(cfg, store_url=url, token=TOKEN, log_dir=tmp_path), base_url="http://127.0.0.1") as c:
        posted = c.post("/api/deployments/local/diagnoses", headers={"Authorization": f"Bearer {TOKEN}"})
        assert posted.status_code == 202, posted.text
    scheduler = Scheduler(cfg, url, owner="test")
    now = datetime.now(timezone.utc)
    scheduler.started = now - timedelta(minutes=5)
    [ran] = scheduler.run_due(now)
    assert ran.ok, ran.detail
    with open_store(url) as store:
        stored = store.list_diagnoses(limit=10)
        assert len(stored) == 3, stored
        found = [_what_was_found(store.get_diagnosis(s.id)) for s in reversed(stored)]
    cli, api, schedule = found
    assert cli["findings"] and cli["checks"], "the steady last days break the TTFT SLO"
    assert api == cli, "the dashboard's API stored another diagnosis than the command line"
    assert schedule == cli, "the schedule stored another diagnosis than the command line"
