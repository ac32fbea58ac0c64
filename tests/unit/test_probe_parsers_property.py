"""The probes' parsers on any input: an engine's /metrics text (probes/exposition.py, then the deltas
and notes computed from it, then the whole engine probe) and Prometheus answers (the `data.result`
JSON read by probes/_primitives.py and the Prometheus probe). Each returns a value or raises an
AdvisorError (ProbeError, BadExposition...), never anything else; and what they return is a
Snapshot whose JSON is standard."""

from __future__ import annotations

import json
import math
from unittest.mock import patch

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.errors import AdvisorError
from advisor.escape import json_text
from probes import _delta, _primitives, _promql, probe_engine, probe_prometheus
from probes import prometheus as prom_probe
from probes.catalog import dialects, signals_for
from probes.exposition import bucket_quantile, parse

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
VLLM = dialects()["vllm"]

# --- /metrics text -------------------------------------------------------------------------------

NAMES = ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
         "vllm:generation_tokens_total", "vllm:prompt_tokens_total", "vllm:request_success_total",
         "vllm:time_to_first_token_seconds_bucket", "vllm:time_to_first_token_seconds_count",
         "vllm:time_to_first_token_seconds_sum", "vllm:e2e_request_latency_seconds_bucket",
         "vllm:e2e_request_latency_seconds_count", "vllm:cache_config_info", "process_cpu_seconds_total", "x"]
LABELS = ["model_name", "engine", "le", "finished_reason", "pod", "enable_prefix_caching", "quantile"]
label_values = st.one_of(st.sampled_from(["tiny-llama", "0", "1.0", "+Inf", "NaN", "-1", "error", "", "x"]),
                         st.text(max_size=12))
good_numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr),
                         st.sampled_from(["NaN", "+Inf", "-Inf", "0", "1e400", "-0"]),
                         st.integers(-10**20, 10**20).map(str), st.integers(0, 50).map(str))
numbers = st.one_of(good_numbers, st.sampled_from(["nope", "1_0", ""]))


def _escape_label(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@st.composite
def sample_lines(draw, clean=False):
    name = draw(st.sampled_from(NAMES))
    labels = draw(st.dictionaries(st.sampled_from(LABELS), label_values, max_size=3))
    raw = not clean and draw(st.integers(0, 9)) == 0  # now and then, an unescaped value
    body = ",".join(f'{k}="{v if raw else _escape_label(v)}"' for k, v in labels.items())
    value = draw(good_numbers if clean else numbers)
    return f"{name}{{{body}}} {value}" if labels else f"{name} {value}"


type_lines = st.builds(lambda n, t: f"# TYPE {n.removesuffix('_total').removesuffix('_bucket')} {t}",
                       st.sampled_from(NAMES), st.sampled_from(["counter", "gauge", "histogram", "summary",
                                                                "untyped", "info", "bogus"]))
# Clean ones (every line a well-formed sample) reach the deltas and the reports; dirty ones the parser.
clean = st.lists(sample_lines(clean=True), min_size=1, max_size=30)
dirty = st.lists(st.one_of(sample_lines(), type_lines, st.text(max_size=30)), max_size=25)
expositions = st.one_of(clean, dirty).map(lambda lines: "\n".join(lines) + "\n")
any_text = st.one_of(st.text(), expositions)


def _ok_or_ours(fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except AdvisorError:
        return None


@SETTINGS
@given(any_text)
def test_exposition_parse_raises_only_our_errors(text):
    s = _ok_or_ours(parse, text)
    if s is not None:
        assert s.samples and all(isinstance(p, str) for p in s.problems)


@SETTINGS
@given(expositions, expositions, st.booleans(), st.one_of(st.none(), st.text(max_size=8)))
def test_deltas_and_notes_from_any_two_scrapes(a, b, per_replica, model):
    first, last = _ok_or_ours(parse, a, 0.0), _ok_or_ours(parse, b, 5.0)
    if first is None or last is None:
        return
    groups = _delta.compute(VLLM, [first, last], model=model, per_replica=per_replica)
    for sigs in groups.values():
        for s in sigs.values():
            assert s.value is None or math.isfinite(s.value)
    _delta.to_replicas(groups)
    assert all(isinstance(n, str) for n in _delta.notes([first, last]))


@SETTINGS
@given(st.lists(expositions, min_size=1, max_size=3), st.text(max_size=40), st.text(max_size=40))
def test_engine_probe_on_any_metrics_version_and_models(texts, version, model_id):
    scrapes = iter(texts)

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(200, text=next(scrapes, texts[-1]))
        if request.url.path == "/version":
            return httpx.Response(200, text=version)
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": model_id, "max_model_len": version}]})
        return httpx.Response(404)

    snap = _ok_or_ours(probe_engine, "http://engine.test", window_s=2, transport=httpx.MockTransport(handler),
                       sleep=lambda s: None)
    if snap is not None:
        json.loads(json_text(snap.model_dump(mode="json")), parse_constant=_refuse)


@SETTINGS
@given(st.floats(0, 1), st.lists(st.tuples(st.floats(), st.floats()), max_size=8))
def test_bucket_quantile_never_raises(q, buckets):
    v, note = bucket_quantile(q, buckets)
    assert isinstance(v, float) and (note is None or isinstance(note, str))


# --- Prometheus answers --------------------------------------------------------------------------

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=10)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20)

PARTS = [f"p{i}" for i in range(30)]
PROM_LABELS = ["le", "pod", "instance", "engine", "model_name", "block_size", _promql.PART_LABEL]


@st.composite
def vector_rows(draw):
    labels = draw(st.dictionaries(st.sampled_from(PROM_LABELS),
                                  st.one_of(label_values, st.sampled_from(PARTS)), max_size=4))
    if draw(st.booleans()):
        labels[_promql.PART_LABEL] = draw(st.sampled_from(PARTS))
    value = draw(st.one_of(numbers, st.floats().map(lambda f: f)))  # now and then not text
    return {"metric": labels, "value": [1700000000.0, value]}


answers = st.one_of(json_values, st.lists(st.one_of(vector_rows(), json_values), max_size=12),
                    st.lists(vector_rows(), max_size=20))


@SETTINGS
@given(answers, st.one_of(st.none(), st.just(["pod", "instance", "engine"])))
def test_answer_handling_raises_only_our_errors(result, by):
    got = _ok_or_ours(_primitives.checked_rows, result, "http://prom.test", "q")
    if got is None:
        return
    rows, notes = got
    answer = _primitives.Answer(rows, by)
    for name, sdef in list(signals_for(VLLM).items())[:40]:
        operands = [answer.buckets if sdef.op == "quantile" else answer.values] * (
            2 if sdef.op in ("mean", "ratio", "share") else 1)
        for v, note in _primitives.from_operands(sdef, operands).values():
            assert isinstance(v, float)


VLLM_NAMES = ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:time_to_first_token_seconds_bucket",
              "vllm:time_to_first_token_seconds_count", "vllm:time_to_first_token_seconds_sum",
              "vllm:e2e_request_latency_seconds_bucket", "vllm:e2e_request_latency_seconds_count",
              "vllm:generation_tokens_total", "vllm:cache_config_info", "DCGM_FI_DEV_GPU_UTIL"]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(answers, min_size=1, max_size=4), st.booleans())
def test_prometheus_probe_on_any_answers(results, per_replica):
    answers_iter = iter(results)

    def query(self, promql, at):
        self.queries += 1
        return next(answers_iter, results[-1])

    with patch.object(prom_probe.PrometheusClient, "query", query), \
            patch.object(prom_probe.PrometheusClient, "metric_names", lambda self: set(VLLM_NAMES)):
        snap = _ok_or_ours(probe_prometheus, "http://prom.test", window_s=60, per_replica=per_replica)
    if snap is not None:
        json.loads(json_text(snap.model_dump(mode="json")), parse_constant=_refuse)


def _refuse(token):
    raise ValueError(f"non-standard JSON token {token}")
