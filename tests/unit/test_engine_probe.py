"""The engine probe against httpx.MockTransport serving real captures and bad answers."""

import re

import httpx
import pytest

from probes import NotAnEngine, ProbeError, TargetUnreachable, probe_engine
from probes.errors import BadExposition

URL = "http://engine.test"


def serve(metrics: list[str], status: int = 200, version=True, models=True, fail_after: int | None = None):
    calls = {"metrics": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/metrics":
            i = calls["metrics"]
            calls["metrics"] += 1
            if fail_after is not None and i >= fail_after:
                raise httpx.ConnectError("connection refused", request=request)
            return httpx.Response(status, text=metrics[min(i, len(metrics) - 1)])
        if path == "/version" and version:
            return httpx.Response(200, json={"version": "0.32.0"})
        if path == "/v1/models" and models:
            return httpx.Response(200, json={"object": "list", "data": [{"id": "tiny-llama", "max_model_len": 2048}]})
        return httpx.Response(404, text="not found")

    return httpx.MockTransport(handler)


def run(transport, window=2.0, **kw):
    return probe_engine(URL, window_s=window, transport=transport, sleep=lambda s: None, **kw)


def test_snapshot_from_real_captures(capture):
    snap = run(serve([capture("metrics-queueing-t0"), capture("metrics-queueing-t1")]))
    assert snap.via == "engine" and snap.engine.kind == "vllm" and snap.engine.version == "0.32.0"
    assert snap.engine.models == ["tiny-llama"] and snap.engine.max_model_len == 2048
    assert snap.engine.config["enable_prefix_caching"] == "False"
    assert snap.signals["requests_waiting_max"].value == 6.0
    assert snap.signals["ttft_p50"].value > 1.0
    # Every catalog signal is present, with a value or a reason.
    assert all(s.present or s.missing for s in snap.signals.values())
    assert snap.signals["gpu_util_avg"].missing


def test_missing_optional_endpoints_are_noted_not_fatal(capture):
    snap = run(serve([capture("metrics-idle-cold")], version=False, models=False))
    assert snap.engine.version is None
    assert any("/version" in p for p in snap.engine.problems)


def test_404_metrics_is_unhealthy():
    with pytest.raises(ProbeError, match="404"):
        run(serve(["x"], status=404))


def test_500_metrics_is_unhealthy():
    with pytest.raises(ProbeError, match="HTTP 500"):
        run(serve(["x"], status=500))


def test_garbage_is_a_clear_error():
    with pytest.raises(BadExposition):
        run(serve(["<html>hello</html>"]))


def test_not_an_engine():
    text = "# TYPE http_requests_total counter\nhttp_requests_total 3\n"
    with pytest.raises(NotAnEngine, match="no metrics of a known LLM engine"):
        run(serve([text]))


def test_connection_refused():
    def refuse(request):
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(TargetUnreachable, match="unreachable"):
        run(httpx.MockTransport(refuse))


def test_timeout():
    def slow(request):
        raise httpx.ReadTimeout("timed out", request=request)

    with pytest.raises(TargetUnreachable, match="did not answer"):
        run(httpx.MockTransport(slow))


def test_engine_dying_mid_window_keeps_what_was_collected(capture):
    snap = run(serve([capture("metrics-queueing-t0"), capture("metrics-queueing-t1")], fail_after=2), window=5.0)
    assert snap.signals["requests_waiting_avg"].value == 6.0
    assert any("failed" in p for p in snap.problems)


def test_engine_dead_after_first_scrape_is_an_error(capture):
    with pytest.raises(TargetUnreachable, match="before a second scrape"):
        run(serve([capture("metrics-queueing-t0")], fail_after=1))


def test_nan_gauge_is_missing_not_a_value(capture):
    text = re.sub(r'(vllm:kv_cache_usage_perc\{[^}]*\}) \S+', r'\1 NaN', capture("metrics-queueing-t1"))
    snap = run(serve([text, text]))
    assert snap.signals["kv_cache_usage_avg"].value is None
    assert snap.signals["kv_cache_usage_avg"].missing == "no samples in the window"
