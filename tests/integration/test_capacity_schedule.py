"""Capacity at the SLO on advisor.yaml's schedule, and over time on the dashboard and in the weekly
report: `advisor serve`'s scheduler searches a replica it did not start (a real llama-server) with
the deployment's own traffic shape read from a real Prometheus, within its guardrails (never more
than max_rate_multiple times the production rate, a request budget), saves the answer, and the
deployment page, its API and the weekly report set it beside the answer of the week before.

The production history is backfilled, not served: a steady 8 requests/s of 30-50-token prompts and
10-20-token answers, in vLLM's metric names, made up here (no engine produced it); what the search
measures is the live llama-server. The week before's answer is saved into the store back-dated."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from fastapi.testclient import TestClient

from advisor.capacity.result import CapacityResult, ObjectiveRow
from advisor.fleet.config import FleetConfig
from advisor.localstack import LlamaServer, LocalPrometheus, backfill, paths
from advisor.localstack.deployment import write_deployment
from advisor.schedule import Scheduler
from advisor.app.weekly import weekly_view, weekly_report
from advisor.store import open_store
from advisor.web import create_app
from tests.support.servers import listener

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

RATE, STEP, LE = 8.0, 15, [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000]
PROMPT, OUTPUT = 40, 16  # in the (20, 50] and (10, 20] buckets
MULTIPLE = 0.5  # a ceiling (4/s) below the production rate the search would start from (8/s)
TOKEN = "t0ken"


def _histogram(name: str, value: int, times: list[int], start: int) -> list[str]:
    labels = 'engine="0",model_name="tiny-llama"'
    out = [f"# TYPE {name} histogram"]
    for ts in times:
        n = int(RATE * (ts - start))
        for le in LE:
            out.append(f'{name}_bucket{{{labels},le="{le}.0"}} {n if value <= le else 0} {ts}')
        out += [f'{name}_bucket{{{labels},le="+Inf"}} {n} {ts}', f"{name}_count{{{labels}}} {n} {ts}",
                f"{name}_sum{{{labels}}} {n * value} {ts}"]
    return out


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    now = int(datetime.now(timezone.utc).timestamp())
    start, end = now - 80 * 60, now - 10 * 60  # within backfill's reach, the last 50 minutes in the window
    times = list(range(start, end + 1, STEP))
    text = _histogram("vllm:request_prompt_tokens", PROMPT, times, start) + \
        _histogram("vllm:request_generation_tokens", OUTPUT, times, start) + \
        ["# TYPE vllm:num_requests_running gauge"] + \
        [f'vllm:num_requests_running{{engine="0",model_name="tiny-llama"}} 1 {ts}' for ts in times] + ["# EOF"]
    data = tmp_path_factory.mktemp("capacity-prom") / "data"
    backfill("\n".join(text) + "\n", data)
    server = LocalPrometheus([], data_dir=data).start()
    yield server
    server.stop()


def _week_before(now: datetime) -> CapacityResult:
    return CapacityResult(
        target="http://127.0.0.1:1", model="tiny-llama", workload="telemetry", started_at=now,
        objectives=[ObjectiveRow(name="ttft_p95", label="TTFT p95 <= 0.5 s", share=0.95, threshold_s=0.5)],
        status="bounded", level=0.95, width_goal=0.1, low=2.5, high=3.5, estimate=3.0, binding="ttft_p95",
        requests=900, seconds=300, trial_requests=86, warmup_requests=43, trials=[])


def test_a_scheduled_capacity_run_keeps_its_guardrails_and_shows_week_over_week(prom, tmp_path):
    (tmp_path / "slo.yaml").write_text("ttft_p95: 0.5\n")
    db = f"sqlite:///{tmp_path / 'advisor.db'}"
    with LlamaServer(model=paths.tiny_gguf("Q8_0"), max_num_seqs=2, threads=1) as engine:
        pid = listener(engine.port)
        # advisor.yaml calls it "prod"; its spec "prod-spec", the name answers are stored under.
        dep = write_deployment(engine, tmp_path / "dep.yaml", name="prod-spec")
        cfg = FleetConfig.model_validate({"deployments": [{
            "name": "prod", "prom_url": prom.url, "deployment": str(dep), "slo": str(tmp_path / "slo.yaml"),
            "capacity": {"every": "7d", "window": "2h", "max_rate_multiple": MULTIPLE, "max_requests": 400,
                         "max_duration": "5m", "trial_requests": 60}}]})
        with open_store(db) as store:
            week_ago = datetime.now(timezone.utc) - timedelta(days=7, hours=12)
            store.save_capacity(_week_before(week_ago), deployment="prod-spec", created_at=week_ago)
        scheduler = Scheduler(cfg, db, owner="one")
        now = datetime.now(timezone.utc)
        [started] = scheduler.run_due(now)
        assert started.job == "capacity:prod" and started.detail == "started"
        assert Scheduler(cfg, db, owner="two").run_due(now) == [], "a second advisor never runs the slot again"
        next_slot = now + timedelta(days=7)
        assert scheduler.run_due(next_slot) == [], "a slot that comes while the search runs waits for it"
        scheduler.wait_background(timeout=500)
        with open_store(db) as store:
            [run] = store.list_job_runs("capacity:prod")  # the next slot was not claimed while it ran
            assert run.ok, run.detail
            [latest, older] = store.list_capacity(deployment="prod-spec")
            _, doc = store.get_capacity(latest.id)
        assert run.detail.startswith(f"capacity run {latest.id}: ")
        assert listener(engine.port) == pid, "the replica the advisor did not start is left serving as it was"

    r = CapacityResult.model_validate(doc)
    # The production rate Prometheus measured (8/s) times the multiple is the ceiling no trial passed.
    ceiling = MULTIPLE * RATE
    assert any(f"rate ceiling {ceiling:.3g} requests/s" in n for n in r.notes), r.notes
    assert r.trials and all(t.rate <= ceiling * 1.001 for t in r.trials), [t.rate for t in r.trials]
    assert r.requests <= 400 + r.trial_requests + r.warmup_requests, "the request budget ends the search"
    assert r.status in ("at least", "bounded", "noise-limited", "partial"), (r.status, r.stopped)
    if r.status == "at least":  # the ceiling held: said as a floor, never as the capacity
        assert r.low == pytest.approx(ceiling, rel=0.01) and r.high is None
    print(f"\nscheduled capacity: {r.summary}; {r.requests} requests, {r.seconds:.0f} s")

    # The weekly report and the dashboard set it beside the week before's 3.0/s [2.5, 3.5].
    with open_store(db) as store:
        [week] = weekly_view(cfg, store).deployments
        md = weekly_report(cfg, store, "markdown")
    assert week.capacity is not None and week.capacity.latest_id == latest.id, week.capacity
    assert "[2.5, 3.5]" in week.capacity.before and "capacity run" in week.capacity.latest
    if r.low is not None and r.low > 3.5:
        assert week.capacity.changed and "apart (up)" in week.capacity.change, week.capacity
    assert "Capacity at the SLO:" in md and week.capacity.change in md

    app = create_app(cfg, store_url=db, token=TOKEN)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        page = client.get("/deployments/prod")
        assert page.status_code == 200 and 'id="capacity-trend"' in page.text
        assert f'href="/capacity/{latest.id}"' in page.text and "[2.5, 3.5]" in page.text
        listing = client.get("/api/deployments/prod/capacity").json()
        assert [c["id"] for c in listing] == [latest.id, older.id] and listing[0]["status"] == r.status
        report = client.get(f"/capacity/{latest.id}")
        assert report.status_code == 200 and "<svg" in report.text and "Capacity at the SLO" in report.text
        assert 'href="/deployments/prod"' in report.text, "back to the deployment's page, by its advisor.yaml name"
        assert client.get("/capacity/999999").status_code == 404
