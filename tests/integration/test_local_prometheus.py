"""A real Prometheus started by the test, serving backfilled history (scraping the live engine is
tests/e2e/test_probe_e2e.py, beside the engine the e2e tests share)."""

import time

import pytest

from advisor.localstack import PrometheusError, backfill

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def synthetic_openmetrics(start: int, points: int, step: int = 15) -> str:
    # Hand-written, not from any engine: only checks that backfilled samples are queryable.
    lines = [
        "# HELP advisor_synthetic_gauge Synthetic test series.",
        "# TYPE advisor_synthetic_gauge gauge",
    ]
    lines += [f'advisor_synthetic_gauge{{source="test"}} {i} {start + i * step}' for i in range(points)]
    return "\n".join(lines + ["# EOF"]) + "\n"


def test_backfilled_series_is_queryable(tmp_path, local_prometheus):
    start = int(time.time()) - 3600  # within the last 2 hours, as the brief's block alignment allows
    backfill(synthetic_openmetrics(start, points=20), tmp_path / "data")
    prom = local_prometheus([], data_dir=tmp_path / "data")
    at = start + 10 * 15
    result = prom.query('advisor_synthetic_gauge{source="test"}', at=at)
    assert [s["value"] for s in result] == [[at, "10"]]


def test_backfill_reports_promtool_errors(tmp_path):
    with pytest.raises(PrometheusError, match="promtool could not backfill"):
        backfill("this is not openmetrics\n", tmp_path / "data")
