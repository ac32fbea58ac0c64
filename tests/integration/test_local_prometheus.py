"""A real Prometheus started by the test: scraping the live engine, and serving backfilled history."""

import time

import pytest

from advisor.localstack import PrometheusError, backfill

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def test_scrapes_the_engine(local_engine, local_prometheus):
    prom = local_prometheus([local_engine.target])
    deadline = time.monotonic() + 30
    while not (up := prom.query("up")) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert [(s["metric"]["instance"], s["value"][1]) for s in up] == [(local_engine.target, "1")]
    assert prom.query('vllm:num_requests_waiting{model_name="tiny-llama"}')


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
