"""Capacity over time: the store's capacity runs, the week-over-week line the dashboard and the weekly
report show, and advisor.yaml's capacity schedule with its guardrails (bad input in one line)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
import yaml
from typer.testing import CliRunner

from advisor.capacity.result import CapacityResult, ObjectiveRow
from advisor.cli import app
from advisor.fleet.config import FleetError, load_config
from advisor.reports.capacity_trend import figure, trend
from advisor.store import CapacitySummary, StoreError, open_store

NOW = datetime(2026, 12, 6, 12, tzinfo=timezone.utc)


def result(low, high, estimate, status="bounded") -> CapacityResult:
    return CapacityResult(
        target="http://user:secret@10.0.0.1:8000", model="m", workload="w", started_at=NOW,
        objectives=[ObjectiveRow(name="ttft_p95", label="TTFT p95 <= 0.5 s", share=0.95, threshold_s=0.5)],
        status=status, level=0.95, width_goal=0.1, low=low, high=high, estimate=estimate, binding="ttft_p95",
        requests=500, seconds=120.0, trial_requests=86, warmup_requests=43, trials=[])


def Summary(id: int, created_at: datetime, status: str, estimate, low, high) -> CapacitySummary:  # noqa: N802
    """A stored answer's summary as the store lists it."""
    return CapacitySummary(id=id, created_at=created_at, deployment="prod", target="http://10.0.0.1:8000", model="m",
                           workload="w", status=status, estimate=estimate, low=low, high=high, level=0.95,
                           binding="ttft_p95", requests=500, seconds=120.0)


def test_intervals_apart_are_a_change_and_overlapping_ones_are_not():
    before = Summary(1, NOW - timedelta(days=7), "bounded", 3.0, 2.5, 3.5)
    up = trend(Summary(2, NOW, "bounded", 5.0, 4.5, 5.5), before)
    assert up.changed and up.change == "+67 %: the intervals are apart (up)" and up.latest_id == 2
    assert "5 requests/s, 95 % interval [4.5, 5.5]" in up.latest and "(capacity run 2)" in up.latest
    same = trend(Summary(3, NOW, "bounded", 3.3, 2.9, 3.8), before)
    assert not same.changed and same.change == "no change shown: the intervals overlap (estimates +10 %)"
    down = trend(Summary(4, NOW, "bounded", 1.0, 0.8, 1.2), before)
    assert down.changed and "(down)" in down.change


def test_open_ends_reach_as_far_as_they_can():
    before = Summary(1, NOW - timedelta(days=7), "bounded", 3.0, 2.5, 3.5)
    # "at least 7.5": its high end is unknown, its low end above last week's high: up.
    floor = trend(Summary(2, NOW, "at least", None, 7.5, None), before)
    assert floor.changed and floor.latest.startswith("at least 7.5 requests/s") and "+150 %" in floor.change
    # A partial answer that knows only where the SLO broke overlaps anything below that.
    partial = trend(Summary(3, NOW, "partial", None, None, 4.0), before)
    assert not partial.changed and partial.change == "no change shown: the intervals overlap"
    assert figure(Summary(4, NOW, "zero", None, None, 0.05)).startswith("0 requests/s")


def test_nothing_measured_says_so():
    assert trend(None, None).latest == "not measured this period" and trend(None, None).latest_id is None
    only = trend(Summary(2, NOW, "bounded", 5.0, 4.5, 5.5), None)
    assert only.change == "no run the period before" and not only.changed


def test_the_store_keeps_each_answer_whole_and_lists_a_deployment_s_by_period(tmp_path):
    with open_store(f"sqlite:///{tmp_path / 'a.db'}") as store:
        old = store.save_capacity(result(2.5, 3.5, 3.0), deployment="prod", created_at=NOW - timedelta(days=8))
        new = store.save_capacity(result(4.5, 5.5, float("nan")), deployment="prod", created_at=NOW - timedelta(days=1))
        store.save_capacity(result(1, 2, 1.5), deployment="other", created_at=NOW)
        assert [c.id for c in store.list_capacity(deployment="prod")] == [new, old]
        week = store.list_capacity(deployment="prod", since=NOW - timedelta(days=7), until=NOW)
        assert [c.id for c in week] == [new] and week[0].estimate is None, "NaN is stored as nothing"
        summary, doc = store.get_capacity(old)
        assert summary.low == 2.5 and summary.deployment == "prod" and "secret" not in summary.target
        again = CapacityResult.model_validate(doc)
        assert again.estimate == 3.0 and again.objectives[0].label == "TTFT p95 <= 0.5 s"
        assert "secret" not in str(doc), "no URL's credentials are stored"
        with pytest.raises(StoreError, match="no capacity run 999"):
            store.get_capacity(999)


def _config(tmp_path, capacity: dict, deployment: bool = True):
    (tmp_path / "dep.yaml").write_text("name: prod\n")
    d = {"name": "prod", "prom_url": "http://127.0.0.1:9090", "capacity": capacity}
    if deployment:
        d["deployment"] = "dep.yaml"
    path = tmp_path / "advisor.yaml"
    path.write_text(yaml.safe_dump({"deployments": [d]}))
    return path


def test_a_capacity_schedule_needs_a_spec_and_sane_guardrails(tmp_path):
    cfg = load_config(_config(tmp_path, {}))
    plan = cfg.deployments[0].capacity
    assert (plan.every, plan.max_rate_multiple, plan.max_duration, plan.max_requests) == ("7d", 2.0, "30m", 20000)
    cases = [({}, False, "capacity needs deployment"),
             ({"max_rate_multiple": 0}, True, "max_rate_multiple"),
             ({"max_duration": "30d"}, True, "max_duration"),
             ({"every": "soon"}, True, "every"),
             ({"slo": "missing.yaml"}, True, "deployments.0.capacity.slo: no such file")]
    for capacity, spec, words in cases:
        with pytest.raises(FleetError) as e:
            load_config(_config(tmp_path, capacity, spec))
        assert words in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_rate_multiple_without_the_production_rate_is_one_line_before_anything_is_sent(tmp_path):
    (tmp_path / "w.yaml").write_text(yaml.safe_dump({"name": "w", "buckets": [{"prompt_tokens": [10, 20],
                                                     "output_tokens": [5, 10]}], "arrival": {"kind": "poisson", "rate": 1}}))
    r = CliRunner().invoke(app, ["capacity", "--target", "http://127.0.0.1:9", "--workload", str(tmp_path / "w.yaml"),
                                 "--max-rate-multiple", "2"])
    assert r.exit_code == 2 and "--max-rate-multiple needs the production rate: give --from-prom" in r.output


def test_a_search_waits_for_no_experiment_and_save_needs_a_spec(tmp_path, monkeypatch):
    """A target an experiment holds (its lock) is not measured: one line, before anything is sent."""
    from advisor.experiments.arms.journal import TargetLock
    from advisor.experiments.design.deployment import load_deployment
    from advisor.experiments.run.session import checked_state_dir
    from advisor.settings import get_settings

    monkeypatch.setenv("ADVISOR_DATA_DIR", str(tmp_path / "data"))
    get_settings.cache_clear()
    dep = tmp_path / "dep.yaml"
    dep.write_text("name: prod\nengine: vllm\nmodel: tiny\nlauncher: endpoints\n"
                   "endpoints: {baseline: 'http://127.0.0.1:9', candidate: 'http://127.0.0.1:10'}\n")
    (tmp_path / "w.yaml").write_text(yaml.safe_dump({"name": "w", "buckets": [{"prompt_tokens": [10, 20],
                                                     "output_tokens": [5, 10]}], "arrival": {"kind": "poisson", "rate": 1}}))
    try:
        with TargetLock(checked_state_dir(load_deployment(dep).key)):
            r = CliRunner().invoke(app, ["capacity", "--deployment", str(dep), "--workload", str(tmp_path / "w.yaml")])
        assert r.exit_code == 2 and "capacity of prod not measured now: another experiment holds this target" in r.output
        r = CliRunner().invoke(app, ["capacity", "--target", "http://127.0.0.1:9", "--workload", str(tmp_path / "w.yaml"),
                                     "--save"])
        assert r.exit_code == 2 and "--save needs --deployment" in r.output
    finally:
        get_settings.cache_clear()
