"""The Prometheus probe against a real Prometheus that holds nothing useful, and against things
that are not a Prometheus at all: a clear error, never a traceback."""

import time

import pytest

from advisor.localstack.prometheus import backfill
from probes import NotAnEngine, ProbeError, TargetUnreachable, probe_prometheus
from tests.support.servers import fake_server, free_port

pytestmark = pytest.mark.integration


def test_empty_prometheus_is_not_an_engine(local_prometheus):
    prom = local_prometheus([])
    with pytest.raises(NotAnEngine, match="holds no metrics of a known engine"):
        probe_prometheus(prom.url, window_s=60)


def test_a_server_that_is_not_prometheus():
    with fake_server() as url:
        with pytest.raises(ProbeError, match="does not answer like a Prometheus"):
            probe_prometheus(url, window_s=60)


def test_unreachable_prometheus():
    with pytest.raises(TargetUnreachable, match="unreachable"):
        probe_prometheus(f"http://127.0.0.1:{free_port()}", window_s=60)


def test_engine_metrics_without_traffic_give_reasons_not_values(tmp_path, local_prometheus):
    """Synthetic history (not a capture): an idle vLLM whose counters never move, and a gauge that is NaN."""
    end = int(time.time()) - 600
    lines = ["# TYPE vllm:num_requests_running gauge", "# TYPE vllm:kv_cache_usage_perc gauge",
             "# TYPE vllm:generation_tokens counter", "# TYPE vllm:time_to_first_token_seconds histogram"]
    for i in range(9):
        t = end - 120 + 15 * i
        lines.append(f'vllm:num_requests_running{{model_name="m",engine="0"}} 0 {t}')
        lines.append(f'vllm:kv_cache_usage_perc{{model_name="m",engine="0"}} NaN {t}')
        lines.append(f'vllm:generation_tokens_total{{model_name="m",engine="0"}} 500 {t}')
        for le in ("0.1", "1.0", "+Inf"):
            lines.append(f'vllm:time_to_first_token_seconds_bucket{{model_name="m",engine="0",le="{le}"}} 7 {t}')
        lines.append(f'vllm:time_to_first_token_seconds_count{{model_name="m",engine="0"}} 7 {t}')
        lines.append(f'vllm:time_to_first_token_seconds_sum{{model_name="m",engine="0"}} 2.1 {t}')
    backfill("\n".join(lines) + "\n# EOF\n", tmp_path / "data")
    prom = local_prometheus([], data_dir=tmp_path / "data")
    from datetime import datetime, timezone

    snap = probe_prometheus(prom.url, window_s=60, at=datetime.fromtimestamp(end, tz=timezone.utc))
    s = snap.signals
    assert s["ttft_p95"].value is None and s["ttft_p95"].missing == "no traffic in the window"
    assert s["generation_tokens_per_s"].value == 0.0
    assert s["kv_cache_usage_avg"].value is None and s["kv_cache_usage_avg"].missing
    assert s["requests_running_avg"].value == 0.0
    assert s["prefix_cache_hit_rate"].missing.startswith("not exposed")
    for sig in s.values():
        assert sig.present or sig.missing, sig.name
