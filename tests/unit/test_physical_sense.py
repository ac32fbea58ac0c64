"""Values that cannot be are no evidence: a negative counter or gauge, a share outside its whole
(KV-cache usage above 1, GPU utilisation above 100 %, a hit rate above 1) or a rate below zero,
from a Prometheus answer or from an engine's /metrics, makes the signal it feeds missing, the
reason naming the series and the value, and no finding is built on it. A /metrics that turns into
another engine's between scrapes is a one-line error naming both."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from advisor.diagnosis import SLO, diagnose, load_rules
from probes import NotAnEngine, probe_engine, probe_prometheus
from tests.support.cli import assert_one_line_error, run_cli
from tests.support.servers import fake_server
from tests.unit.test_promql import NAMES, fake, row, table  # noqa: F401  (fake is a fixture)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "vllm-0.32.0-cpu"
E2E = "vllm:e2e_request_latency_seconds"
ERRORED = 'sum (rate(vllm:request_success_total{finished_reason=~"error"}[60s]))'
FINISHED = "sum (rate(vllm:request_success_total[60s]))"
KV_AVG = "avg_over_time((avg (vllm:kv_cache_usage_perc))[60s:3s])"
KV_MAX = "max_over_time((avg (vllm:kv_cache_usage_perc))[60s:3s])"
MORE = ["vllm:request_success_total", "vllm:kv_cache_usage_perc", "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total"]
RULES = load_rules()
REFUSED = "impossible value, refused as evidence"

SGLANG = """\
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="tiny-llama"} 2.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="tiny-llama"} 5.0
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="tiny-llama"} 1200.0
"""


def text(stem: str) -> str:
    return (FIXTURES / f"{stem}.txt").read_text()


def refused(sig) -> bool:
    return sig.value is None and sig.missing is not None and sig.missing.startswith(REFUSED)


def no_finding_on(snap, signal: str, rule: str) -> None:
    d = diagnose(snap, RULES, SLO())
    assert rule not in {f.rule_id for f in d.findings}
    assert not [f for f in d.findings if f.severity == "critical"]
    assert not [e for f in d.findings for e in f.evidence if e.signal == signal]


# --- from a Prometheus answer ----------------------------------------------------------------------

def prometheus(fake, **rows):  # noqa: F811
    t = table()
    for expr, value in rows.items():
        t[expr] = value if isinstance(value, list) else [row(value)]
    return probe_prometheus(fake(NAMES + MORE, t).url, window_s=60)


def test_negative_counters_from_prometheus_are_no_error_rate_and_no_finding(fake):  # noqa: F811
    # The control: the same answer with the signs right is a critical error-rate finding.
    real = prometheus(fake, **{ERRORED: 5, FINISHED: 5})
    assert real.signals["error_rate"].value == 1.0
    assert "ADV006" in {f.rule_id for f in diagnose(real, RULES, SLO()).findings}

    snap = prometheus(fake, **{ERRORED: -5, FINISHED: -5})
    sig = snap.signals["error_rate"]
    assert refused(sig), sig
    assert "vllm:request_success_total" in sig.missing and "= -5" in sig.missing and "below zero" in sig.missing
    no_finding_on(snap, "error_rate", "ADV006")
    d = diagnose(snap, RULES, SLO())
    assert any(n.rule_id == "ADV006" and REFUSED in n.reason for n in d.not_evaluated)


def test_a_negative_request_rate_from_prometheus_is_missing(fake):  # noqa: F811
    snap = prometheus(fake, **{f"sum (rate({E2E}_count[60s]))": -5})
    for name in ("request_rate", "e2e_mean"):
        sig = snap.signals[name]
        assert refused(sig) and f"{E2E}_count" in sig.missing and "= -5" in sig.missing, sig
    assert snap.signals["e2e_p50"].value is not None  # the buckets were fine


def test_a_negative_gauge_from_prometheus_is_missing(fake):  # noqa: F811
    snap = prometheus(fake, **{"avg_over_time((sum (vllm:num_requests_running))[60s:3s])": -2})
    sig = snap.signals["requests_running_avg"]
    assert refused(sig) and "vllm:num_requests_running" in sig.missing and "= -2" in sig.missing


@pytest.mark.parametrize("value, says", [(-5, "cannot be negative"), (1.5, "cannot be above 1")])
def test_kv_usage_outside_0_1_from_prometheus_is_missing(fake, value, says):  # noqa: F811
    snap = prometheus(fake, **{KV_AVG: value, KV_MAX: value})
    for name in ("kv_cache_usage_avg", "kv_cache_usage_max"):
        sig = snap.signals[name]
        assert refused(sig) and "vllm:kv_cache_usage_perc" in sig.missing and f"= {value:g}" in sig.missing, sig
        assert says in sig.missing
    no_finding_on(snap, "kv_cache_usage_max", "ADV002")


def test_kv_usage_inside_0_1_is_kept(fake):  # noqa: F811
    snap = prometheus(fake, **{KV_AVG: 0.0, KV_MAX: 1.0})
    assert snap.signals["kv_cache_usage_avg"].value == 0.0 and snap.signals["kv_cache_usage_max"].value == 1.0


def test_a_hit_rate_above_1_is_missing(fake):  # noqa: F811
    hits, queries = "sum (rate(vllm:prefix_cache_hits_total[60s]))", "sum (rate(vllm:prefix_cache_queries_total[60s]))"
    snap = prometheus(fake, **{hits: 10, queries: 5})
    sig = snap.signals["prefix_cache_hit_rate"]
    assert refused(sig) and "prefix_cache_hit_rate = 2" in sig.missing and "cannot be above 1" in sig.missing
    assert prometheus(fake, **{hits: 5, queries: 10}).signals["prefix_cache_hit_rate"].value == 0.5


def test_gpu_utilisation_above_100_and_negative_memory_from_dcgm(fake):  # noqa: F811
    t = table()
    t["avg_over_time((avg (DCGM_FI_DEV_GPU_UTIL))[60s:3s])"] = [row(250)]
    t["sum (avg_over_time(DCGM_FI_DEV_FB_USED[60s]))"] = [row(-100)]
    t["sum (avg_over_time(DCGM_FI_DEV_FB_FREE[60s]))"] = [row(1000)]
    names = NAMES + ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"]
    snap = probe_prometheus(fake(names, t).url, window_s=60, per_replica=False)
    util, mem = snap.signals["gpu_util_avg"], snap.signals["gpu_memory_used_frac"]
    assert refused(util) and "DCGM_FI_DEV_GPU_UTIL" in util.missing and "= 250" in util.missing
    assert "cannot be above 100" in util.missing
    assert refused(mem) and "DCGM_FI_DEV_FB_USED" in mem.missing and "= -100" in mem.missing


def test_one_replica_with_an_impossible_row_leaves_the_others(fake):  # noqa: F811
    snap = prometheus(fake, **{f"sum by (pod, instance, engine) (rate({E2E}_count[60s]))": [row(2, pod="a"),
                                                                                            row(-1, pod="b")]})
    rep = {r.labels["pod"]: r.signals for r in snap.replicas}
    assert rep["a"]["request_rate"].value == 2
    assert refused(rep["b"]["request_rate"]) and 'pod="b"' in rep["b"]["request_rate"].missing
    assert snap.signals["request_rate"].value == 3  # the aggregate's own answer was fine


def test_a_negative_quantile_is_missing(fake):  # noqa: F811
    snap = prometheus(fake, **{f"sum by (le) (rate({E2E}_bucket[60s]))": [row(1, le="-2"), row(3, le="-1"),
                                                                         row(3, le="+Inf")]})
    sig = snap.signals["e2e_p50"]
    assert refused(sig) and "e2e_p50 = -" in sig.missing and "below zero" in sig.missing


def test_sane_answers_refuse_nothing(fake):  # noqa: F811
    snap = prometheus(fake, **{ERRORED: 0.1, FINISHED: 5, KV_AVG: 0.4, KV_MAX: 0.9})
    assert not [s for s in snap.signals.values() if s.missing and REFUSED in s.missing]
    assert snap.signals["error_rate"].value == pytest.approx(0.02)


# --- from an engine's /metrics ---------------------------------------------------------------------

def engine(pages: list[str]):
    calls = iter(range(10**6))

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(200, text=pages[min(next(calls), len(pages) - 1)])
        return httpx.Response(404)

    return probe_engine("http://engine.test", window_s=len(pages) - 1, transport=httpx.MockTransport(handler),
                        sleep=lambda s: None)


def set_value(page: str, name: str, value: float, having: str = "") -> str:
    out, n = re.subn(rf"^({re.escape(name)}\{{[^}}]*{re.escape(having)}[^}}]*\}}) \S+$", rf"\g<1> {value}", page,
                     flags=re.M)
    assert n, name
    return out


def test_a_negative_gauge_in_metrics_is_missing():
    bad = set_value(text("metrics-queueing-t1"), "vllm:num_requests_running", -5.0)
    snap = engine([text("metrics-queueing-t0"), bad])
    for name in ("requests_running_avg", "requests_running_max"):
        sig = snap.signals[name]
        assert refused(sig) and "vllm:num_requests_running{" in sig.missing and "= -5" in sig.missing, sig
        assert "scrape 2 of 2" in sig.missing
    assert snap.signals["requests_waiting_max"].value == 6.0  # the other gauges stand


def test_negative_error_counters_in_metrics_are_no_error_rate_and_no_finding():
    t0 = set_value(text("metrics-queueing-t0"), "vllm:request_success_total", -50.0, 'finished_reason="error"')
    t1 = set_value(text("metrics-queueing-t1"), "vllm:request_success_total", -3.0, 'finished_reason="error"')
    snap = engine([t0, t1])
    sig = snap.signals["error_rate"]
    assert refused(sig) and 'vllm:request_success_total{engine="0",finished_reason="error"' in sig.missing
    assert "= -50" in sig.missing and "counter" in sig.missing
    no_finding_on(snap, "error_rate", "ADV006")


def test_a_negative_counter_that_stands_still_is_no_zero_rate():
    # -5 then -5: an increase of 0, which would read as "no traffic" were the value believed.
    t0 = set_value(text("metrics-queueing-t0"), "vllm:prompt_tokens_total", -5.0)
    t1 = set_value(text("metrics-queueing-t1"), "vllm:prompt_tokens_total", -5.0)
    sig = engine([t0, t1]).signals["prompt_tokens_per_s"]
    assert refused(sig) and "vllm:prompt_tokens_total" in sig.missing and "= -5 in scrape 1 of 2" in sig.missing


@pytest.mark.parametrize("value", [1.7, -0.5])
def test_kv_usage_outside_0_1_in_metrics_is_missing(value):
    bad = set_value(text("metrics-queueing-t1"), "vllm:kv_cache_usage_perc", value)
    snap = engine([text("metrics-queueing-t0"), bad])
    for name in ("kv_cache_usage_avg", "kv_cache_usage_max"):
        sig = snap.signals[name]
        assert refused(sig) and "vllm:kv_cache_usage_perc{" in sig.missing and f"= {value:g}" in sig.missing, sig
    no_finding_on(snap, "kv_cache_usage_max", "ADV002")


def test_a_negative_histogram_count_in_metrics_is_no_request_rate():
    bad = set_value(text("metrics-queueing-t1"), f"{E2E}_count", -4.0)
    snap = engine([text("metrics-queueing-t0"), bad])
    sig = snap.signals["request_rate"]
    assert refused(sig) and f"{E2E}_count" in sig.missing and "= -4" in sig.missing
    assert snap.signals["e2e_p50"].value is not None  # the buckets were fine


@pytest.mark.parametrize("value, says", [("+Inf", "cannot be infinite"), ("1e308", "no reading of any deployment")])
def test_an_infinite_or_absurd_gauge_in_metrics_is_refused_with_its_reason(value, says):
    """+Inf KV usage was dropped without a word (the signal read "no data"), and a queue of 1e308
    requests was believed: both are refused, the reason naming the series, value and scrape."""
    name = "vllm:kv_cache_usage_perc" if value == "+Inf" else "vllm:num_requests_waiting"
    bad = set_value(text("metrics-queueing-t1"), name, value)
    snap = engine([text("metrics-queueing-t0"), bad])
    signal = "kv_cache_usage_max" if value == "+Inf" else "requests_waiting_max"
    sig = snap.signals[signal]
    assert refused(sig) and f"{name}{{" in sig.missing and says in sig.missing and "scrape 2 of 2" in sig.missing, sig
    assert snap.signals["requests_running_max"].value is not None  # the other gauges stand


def test_an_absurd_queue_from_prometheus_is_missing(fake):  # noqa: F811
    snap = prometheus(fake, **{"max_over_time((sum (vllm:num_requests_running))[60s:3s])": 1e308})
    sig = snap.signals["requests_running_max"]
    assert refused(sig) and "vllm:num_requests_running" in sig.missing and "no reading of any deployment" in sig.missing


def test_real_captures_refuse_nothing():
    for pages in (["metrics-queueing-t0", "metrics-queueing-t1"], ["metrics-prefix-t1", "metrics-after-restart"],
                  ["metrics-idle-cold", "metrics-idle-cold"]):
        snap = engine([text(p) for p in pages])
        assert not [s for s in snap.signals.values() if s.missing and REFUSED in s.missing], pages
        assert all(r for r in snap.replicas)


# --- a /metrics that changes engine between scrapes ------------------------------------------------

def test_a_dialect_change_between_scrapes_is_one_line_naming_both():
    with pytest.raises(NotAnEngine) as e:
        engine([text("metrics-queueing-t0"), SGLANG])
    msg = str(e.value)
    assert "\n" not in msg and "changed engine between scrapes" in msg
    assert "scrape 1 was vllm" in msg and "scrape 2 of 2 is sglang" in msg


def test_a_later_scrape_of_no_known_engine_is_one_line():
    with pytest.raises(NotAnEngine, match="scrape 1 was vllm, scrape 3 of 3 is no known engine"):
        engine([text("metrics-queueing-t0"), text("metrics-queueing-t1"), "# TYPE up gauge\nup 1\n"])


def test_a_dialect_change_through_the_command_line_is_one_line(tmp_path):
    (tmp_path / "vllm.txt").write_text(text("metrics-queueing-t0"))
    (tmp_path / "sglang.txt").write_text(SGLANG)
    with fake_server("--metrics", str(tmp_path / "vllm.txt"), "--metrics", str(tmp_path / "sglang.txt")) as url:
        r = run_cli("probe", "--url", url, "--window", "1s", data_dir=tmp_path / "data")
    line = assert_one_line_error(r, contains="changed engine between scrapes")
    assert "vllm" in line and "sglang" in line
