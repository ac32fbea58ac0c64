"""The dialect catalog: every engine file loads, uses known keys, and detects only its engine."""

from collections import defaultdict
from pathlib import Path

import pytest

from probes import catalog
from probes.exposition import parse

DIALECT_DIR = Path(catalog.__file__).parent / "dialects"

# Counters whose exposed name has no `_total`, each explained in a comment of its dialect file:
# TGI's Rust metrics exporter and Triton's prometheus-cpp write counters under the bare name (the
# files list the `_total` form our parser produces beside it), and TGI's token counters are the
# running _sum of a histogram.
NO_TOTAL_SUFFIX = {
    ("tgi", "tgi_request_count"),
    ("tgi", "tgi_request_failure"),
    ("tgi", "tgi_request_input_length_sum"),
    ("tgi", "tgi_request_generated_tokens_sum"),
    ("triton", "nv_inference_request_success"),
    ("triton", "nv_inference_request_failure"),
}


def _specs():
    for engine, d in catalog.dialects().items():
        for key, spec in d.metrics.items():
            yield engine, key, spec


def test_every_dialect_file_loads_under_its_own_name():
    loaded = catalog.dialects()
    files = sorted(DIALECT_DIR.glob("*.yaml"))
    assert {p.stem for p in files} == set(loaded)
    for p in files:
        assert catalog.load_dialect(p).engine == p.stem
    assert {"vllm", "sglang", "tgi", "llamacpp", "trtllm", "triton", "dcgm"} <= set(loaded)


def test_every_metric_key_is_one_the_catalog_knows():
    known = {op for s in catalog.signal_defs().values() for op in s.operands()}
    known |= set(catalog.dialects()["vllm"].metrics)
    for engine, key, _ in _specs():
        assert key in known, f"{engine}: unknown metric key {key!r} (typo?)"


def test_a_key_has_one_type_and_unit_everywhere():
    seen = defaultdict(set)
    for engine, key, spec in _specs():
        seen[key].add((spec.type, spec.unit))
    clashes = {k: v for k, v in seen.items() if len(v) > 1}
    assert not clashes, f"the same key with different type/unit across dialects: {clashes}"


def test_detect_names_are_the_dialects_own_names():
    for engine, d in catalog.dialects().items():
        own = {n for spec in d.metrics.values() for n in spec.names}
        own |= {n for info in d.info.values() for n in info.names}
        assert set(d.detect) <= own, f"{engine}: detect names not among its metrics: {set(d.detect) - own}"


def test_detect_names_never_overlap_between_engines():
    owner = {}
    for engine, d in catalog.dialects().items():
        for name in d.detect:
            assert name not in owner, f"{name} detects both {owner[name]} and {engine}"
            owner[name] = engine


def test_counters_end_in_total_unless_a_documented_exception():
    used = set()
    for engine, key, spec in _specs():
        if spec.type != "counter":
            continue
        for name in spec.names:
            if not name.endswith("_total"):
                assert (engine, name) in NO_TOTAL_SUFFIX, f"{engine}.{key}: counter {name} lacks _total"
                used.add((engine, name))
    assert used == NO_TOTAL_SUFFIX, f"stale exceptions: {NO_TOTAL_SUFFIX - used}"
    for engine in {e for e, _ in NO_TOTAL_SUFFIX}:
        comments = [ln for ln in (DIALECT_DIR / f"{engine}.yaml").read_text().splitlines() if ln.lstrip().startswith("#")]
        assert any("_total" in ln for ln in comments), f"{engine}.yaml does not explain its counters without _total"


def test_every_dialect_file_cites_its_source():
    for p in DIALECT_DIR.glob("*.yaml"):
        if p.stem in ("vllm", "dcgm"):
            continue  # verified against live captures, which their headers name
        header = p.read_text().split("\nengine:")[0]
        assert header.startswith("#") and "verified against" in header.lower(), p.name


# Hand-written example expositions, NOT captures from a live engine: each holds a few series
# shaped the way the engine's source writes them, to test detection only.
HAND_WRITTEN = {
    "sglang": """\
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 2.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 5.0
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="m"} 1200.0
""",
    "tgi": """\
# TYPE tgi_queue_size gauge
tgi_queue_size 3
# TYPE tgi_request_count counter
tgi_request_count 41
# TYPE tgi_request_duration histogram
tgi_request_duration_bucket{le="0.5"} 10
tgi_request_duration_bucket{le="+Inf"} 40
tgi_request_duration_sum 17.5
tgi_request_duration_count 40
""",
    "llamacpp": """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 6886
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 3469
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 0
""",
    "trtllm": """\
# TYPE trtllm_request_success_total counter
trtllm_request_success_total{engine_type="trtllm",finished_reason="stop",model_name="m"} 12.0
# TYPE trtllm_kv_cache_utilization gauge
trtllm_kv_cache_utilization{engine_type="trtllm",model_name="m"} 0.42
""",
    "triton": """\
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="tensorrt_llm",version="1"} 500
# TYPE nv_trt_llm_request_metrics gauge
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="scheduled",version="1"} 4
""",
}


@pytest.mark.parametrize("engine", sorted(HAND_WRITTEN))
def test_hand_written_exposition_detects_exactly_its_engine(engine):
    names = parse(HAND_WRITTEN[engine]).names
    assert catalog.detect_engines(names) == [engine]


def test_bare_counter_resolves_through_prometheus_and_through_our_parser():
    # TGI exposes `tgi_request_count` and Prometheus stores it so; prometheus_client's parser, which
    # the engine probe uses, renames it `tgi_request_count_total`. The dialect must find either.
    parsed = parse(HAND_WRITTEN["tgi"]).names
    assert "tgi_request_count_total" in parsed and "tgi_request_count" not in parsed
    tgi = catalog.dialects()["tgi"]
    assert tgi.resolve("requests_finished", parsed) == "tgi_request_count_total"
    assert tgi.resolve("requests_finished", {"tgi_request_count"}) == "tgi_request_count"
    assert tgi.resolve("e2e", parsed) == "tgi_request_duration"
    triton = catalog.dialects()["triton"]
    assert triton.resolve("requests_finished", parse(HAND_WRITTEN["triton"]).names) == "nv_inference_request_success_total"


def test_real_vllm_capture_still_detects_only_vllm(capture):
    names = parse(capture("metrics-queueing-t1")).names
    assert catalog.detect_engines(names) == ["vllm"]


ROOT = DIALECT_DIR.parents[1]


def test_a_dialect_marked_verified_has_live_captures_that_it_reads():
    verified = {e: d for e, d in catalog.engine_dialects().items() if d.verified_live}
    assert {"vllm", "llamacpp"} <= set(verified), "the two engines this project runs live"
    for engine, d in verified.items():
        folder = ROOT / d.verified_live.fixtures
        captures = sorted(folder.glob("metrics*.txt"))
        assert captures, f"{engine}: no metrics*.txt in {folder}"
        for path in captures:
            names = parse(path.read_text()).names
            assert catalog.detect_engines(names) == [engine], (engine, path.name)
            # Every metric the dialect maps that this build exports, by its first name or a fallback:
            # at least the queue, the running requests and the generated tokens.
            found = {key for key, spec in d.metrics.items() if d.resolve(key, names)}
            assert {"running", "waiting", "generation_tokens"} <= found, (engine, path.name, sorted(found))
