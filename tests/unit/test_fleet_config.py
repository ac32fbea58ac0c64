"""advisor.yaml: relative paths from its own folder, one line naming the field for every mistake,
and five-field cron expressions."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from advisor.fleet.config import FleetError, load_config
from advisor.fleet.cron import parse_cron
from advisor.schedule import last_fire

GOOD = """
deployments:
  - name: local                       # the id used in URLs and reports
    prom_url: http://127.0.0.1:9090
    deployment: deploy.yaml
    slo: slo.yaml
    diagnose_every: 15m
weekly_report: {cron: "0 8 * * MON", out_dir: reports/, webhook: null}
"""


def write(tmp_path, text: str, *files: str):
    for f in files:
        (tmp_path / f).write_text("x: 1\n")
    path = tmp_path / "advisor.yaml"
    path.write_text(text)
    return path


def test_the_issue_example_loads_with_paths_from_its_folder(tmp_path):
    cfg = load_config(write(tmp_path, GOOD, "deploy.yaml", "slo.yaml"))
    [d] = cfg.deployments
    assert d.deployment == tmp_path / "deploy.yaml" and d.slo == tmp_path / "slo.yaml"
    assert cfg.weekly_report.out_dir == tmp_path / "reports"
    assert cfg.get("local") is d and cfg.get("other") is None


@pytest.mark.parametrize("text, message", [
    ("deployments: []", "field deployments:"),
    ("deployments: [{name: a}]", "field deployments.0.prom_url: Field required"),
    ("deployments: [{name: 'a b', prom_url: 'http://x'}]", "field deployments.0.name: "),
    ("deployments: [{name: a, prom_url: 'ftp://x'}]", "field deployments.0.prom_url: "),
    ("deployments: [{name: a, prom_url: 'http://x', every: 5m}]", "unknown key"),
    ("deployments: [{name: a, prom_url: 'http://x', diagnose_every: soon}]", "field deployments.0.diagnose_every"),
    ("deployments: [{name: a, prom_url: 'http://x'}, {name: a, prom_url: 'http://y'}]", "appears twice"),
    ("deployments: [{name: a, prom_url: 'http://x', slo: missing.yaml}]", "deployments.0.slo: no such file"),
    ("deployments: [{name: a, prom_url: 'http://x'}]\nweekly_report: {cron: '0 8 * *'}", "expected 5 fields"),
    ("deployments: [{name: a, prom_url: 'http://x'}]\nweekly_report: {cron: '0 25 * * *'}", "hour: 25 is outside"),
])
def test_mistakes_are_one_line_naming_the_field(tmp_path, text, message):
    with pytest.raises(FleetError) as e:
        load_config(write(tmp_path, text))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_no_config_says_how_to_give_one(monkeypatch):
    from advisor.settings import get_settings

    monkeypatch.delenv("ADVISOR_CONFIG", raising=False)
    get_settings.cache_clear()
    try:
        with pytest.raises(FleetError, match="--config advisor.yaml or set ADVISOR_CONFIG"):
            load_config(None)
    finally:
        get_settings.cache_clear()


@pytest.mark.parametrize("expr, after, expected", [
    ("0 8 * * MON", "2026-12-01T13:00", "2026-12-07T08:00"),
    ("*/15 * * * *", "2026-12-01T13:00", "2026-12-01T13:15"),
    ("30 2 1 * *", "2026-12-01T13:00", "2027-01-01T02:30"),
    ("0 0 29 2 *", "2026-12-01T13:00", "2028-02-29T00:00"),
    ("0 0 1 * fri", "2026-12-01T13:00", "2026-12-04T00:00"),  # either day field, as cron reads it
    ("0 9-17/4 * * 1-5", "2026-12-05T10:00", "2026-12-07T09:00"),
    ("0 0 * * 7", "2026-12-01T00:00", "2026-12-06T00:00"),  # 7 is Sunday too
])
def test_cron_next_time(expr, after, expected):
    t = datetime.fromisoformat(after).replace(tzinfo=timezone.utc)
    assert parse_cron(expr).next_after(t) == datetime.fromisoformat(expected).replace(tzinfo=timezone.utc)


def test_last_fire_is_the_latest_time_at_or_before_now():
    now = datetime(2026, 12, 1, 13, 0, tzinfo=timezone.utc)
    assert last_fire("0 8 * * MON", now) == datetime(2026, 11, 30, 8, 0, tzinfo=timezone.utc)
    assert last_fire("0 13 * * *", now) == now
