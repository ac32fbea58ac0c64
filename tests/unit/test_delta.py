"""Signals computed from two real scrapes of a vLLM CPU engine, 10 s apart, while 6 requests
queued behind --max-num-seqs 2."""

import pytest

from probes._delta import compute, to_replicas
from probes.catalog import dialects
from probes.exposition import parse

VLLM = dialects()["vllm"]


@pytest.fixture
def queueing(capture):
    return [parse(capture("metrics-queueing-t0"), 0.0), parse(capture("metrics-queueing-t1"), 10.0)]


def test_queueing_capture_shows_the_queue(queueing):
    sig = compute(VLLM, queueing)[()]
    assert sig["requests_waiting_avg"].value == 6.0
    assert sig["requests_running_max"].value == 2.0
    assert sig["ttft_p50"].value > 1.0  # queued behind two running requests
    assert sig["tpot_p50"].value < 0.1  # decode itself is fast
    assert sig["request_rate"].value > 0 and sig["generation_tokens_per_s"].value > 0


def test_rates_are_deltas_over_the_window(queueing, capture):
    t0, t1 = queueing
    name = "vllm:generation_tokens_total"
    expected = (sum(t1.series(name).values()) - sum(t0.series(name).values())) / 10.0
    assert compute(VLLM, queueing)[()]["generation_tokens_per_s"].value == pytest.approx(expected)


def test_ratio_without_its_denominator_says_which_count_was_zero(queueing):
    # Prefix caching was off while requests flowed: "no traffic" would be false, so the reason
    # names the count that stayed at zero.
    snap = compute(VLLM, queueing)[()]
    assert snap["request_rate"].value and snap["request_rate"].value > 0
    sig = snap["prefix_cache_hit_rate"]
    assert sig.value is None and sig.missing == "no prefix queries counted in the window, so no ratio"


def test_unexposed_metric_says_so(queueing):
    sig = compute(VLLM, queueing)[()]["spec_acceptance_rate"]
    assert sig.value is None and "not exposed" in sig.missing


def test_idle_window_has_no_latency(capture):
    s = parse(capture("metrics-idle-after-load"), 0.0)
    sig = compute(VLLM, [s, parse(capture("metrics-idle-after-load"), 10.0)])[()]
    assert sig["ttft_p95"].value is None and sig["ttft_p95"].missing == "no traffic in the window"
    assert sig["request_rate"].value == 0.0


def test_counter_reset_counts_from_zero(capture):
    # The idle-cold capture is a fresh engine: every counter is below the loaded capture's.
    before, after = parse(capture("metrics-queueing-t1"), 0.0), parse(capture("metrics-idle-cold"), 10.0)
    name = "vllm:generation_tokens_total"
    assert sum(after.series(name).values()) < sum(before.series(name).values())
    sig = compute(VLLM, [before, after])[()]
    # A reset counter's whole current value is the increase, never a negative rate.
    assert sig["generation_tokens_per_s"].value == pytest.approx(sum(after.series(name).values()) / 10.0)
    assert sig["request_rate"].value >= 0


def test_model_filter_drops_other_models(queueing):
    sig = compute(VLLM, queueing, model="some-other-model")[()]
    assert sig["ttft_p50"].value is None


def test_per_replica_groups_by_engine_label(queueing):
    reps = to_replicas(compute(VLLM, queueing, per_replica=True))
    assert [r.labels for r in reps] == [{"engine": "0"}]
    assert reps[0].signals["requests_waiting_avg"].value == 6.0
