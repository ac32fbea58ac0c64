"""Every parser of a user's file, on any input: it returns a value or raises an AdvisorError (one
line naming the file), never anything else. Arbitrary bytes, and YAML/JSON/CSV built from the
parsers' own field names with values of every type (NaN, infinities, huge integers, booleans)."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.diagnosis import load_overrides, load_slo
from advisor.errors import AdvisorError
from advisor.experiments.design.deployment import load_deployment
from advisor.inputs import decode, parse_yaml
from advisor.workload.spec import load_workload
from advisor.workload.traces import load_trace, trace_requests, trace_to_workload

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Field names of every input model, so that generated documents reach deep into validation.
KEYS = [
    "ttft_p95", "tpot_p95", "e2e_p99", "error_rate", "goodput_min", "slo",
    "ADV001", "ADV007", "ADV404", "params", "severity", "thresholds", "enabled", "low", "moderate", "severe",
    "critical", "max_preemptions",
    "name", "engine", "model", "launcher", "local", "endpoints", "prometheus", "command", "args", "env", "host",
    "port", "candidate_port", "arms", "health_path", "start_timeout_s", "port_flag", "baseline", "candidate",
    "api", "buckets", "prompt_tokens", "output_tokens", "weight", "prefix", "groups", "tokens", "share", "arrival",
    "kind", "rate", "burstiness", "concurrency", "cancellation", "after_tokens", "duration_s", "requests",
    "warmup_s", "seed", "tokenizer", "source",
]
TEXTS = ["vllm", "local", "endpoints", "poisson", "gamma", "concurrency", "parallel", "sequential", "chat",
         "false", "true", "nan", "1", "-1", "8000", "http://127.0.0.1:8000", ""]

scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(TEXTS), st.text(max_size=12),
)
documents = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), inner, max_size=6)),
    max_leaves=30,
)
top_level = st.dictionaries(st.sampled_from(KEYS), documents, max_size=8) | documents


def _write(data: bytes, suffix: str) -> Path:
    d = Path(tempfile.mkdtemp(prefix="advisor-prop-"))
    path = d / f"input{suffix}"
    path.write_bytes(data)
    return path


def _only_advisor_errors(fn, *args) -> object:
    try:
        return fn(*args)
    except AdvisorError as e:
        assert "\n" not in str(e).strip(), str(e)
        return None


YAML_LOADERS = [load_slo, load_overrides, load_deployment, load_workload]


def _trace_all(path: Path, fmt: str) -> None:
    trace = _only_advisor_errors(load_trace, path, fmt)
    if trace is not None:
        _only_advisor_errors(trace_to_workload, trace)
        _only_advisor_errors(trace_requests, trace)


@SETTINGS
@given(st.binary(max_size=400))
def test_yaml_loaders_on_arbitrary_bytes(data):
    path = _write(data, ".yaml")
    for load in YAML_LOADERS:
        _only_advisor_errors(load, path)


@SETTINGS
@given(st.text(max_size=300))
def test_yaml_loaders_on_arbitrary_text(text):
    path = _write(text.encode("utf-8", "surrogatepass"), ".yaml")
    for load in YAML_LOADERS:
        _only_advisor_errors(load, path)


@SETTINGS
@given(top_level)
def test_yaml_loaders_on_yamlish_documents(doc):
    path = _write(yaml.safe_dump(doc, allow_unicode=True).encode("utf-8", "surrogatepass"), ".yaml")
    for load in YAML_LOADERS:
        _only_advisor_errors(load, path)


@SETTINGS
@given(st.dictionaries(st.sampled_from(["ttft_p95", "tpot_p95", "e2e_p99", "error_rate", "goodput_min"]),
                       st.floats(allow_nan=True, allow_infinity=True)))
def test_a_loaded_slo_is_always_finite(doc):
    slo = _only_advisor_errors(load_slo, _write(yaml.safe_dump(doc).encode(), ".yaml"))
    if slo is not None:
        assert all(v is None or math.isfinite(v) for v in slo.model_dump().values())


@SETTINGS
@given(st.binary(max_size=400), st.sampled_from(["auto", "jsonl", "mooncake", "azure"]),
       st.sampled_from([".jsonl", ".csv", ""]))
def test_trace_readers_on_arbitrary_bytes(data, fmt, suffix):
    _trace_all(_write(data, suffix), fmt)


trace_values = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**25), max_value=10**25),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
    st.sampled_from(["2024-05-10 00:00:00.009930+00:00", "2023-11-16 18:17:03.9799600", "9999-12-31T23:59:59-23:59",
                     "0001-01-01T00:00:00+23:59", "12", "1e400"]),
    st.lists(st.integers(min_value=-3, max_value=3) | st.booleans(), max_size=4),
)
trace_rows = st.lists(
    st.dictionaries(st.sampled_from(["timestamp", "prompt_tokens", "output_tokens", "prefix_id", "prefix_tokens",
                                     "input_length", "output_length", "hash_ids"]), trace_values, max_size=6),
    min_size=1, max_size=12)


@SETTINGS
@given(trace_rows, st.sampled_from(["auto", "jsonl", "mooncake"]))
def test_json_trace_readers_on_jsonish_rows(rows, fmt):
    text = "\n".join(json.dumps(r) for r in rows) + "\n"
    _trace_all(_write(text.encode(), ".jsonl"), fmt)


@SETTINGS
@given(st.lists(st.tuples(trace_values, trace_values, trace_values), max_size=10),
       st.sampled_from(["TIMESTAMP,ContextTokens,GeneratedTokens", "TIMESTAMP,ContextTokens", ""]))
def test_azure_reader_on_csvish_rows(rows, header):
    text = header + "\n" + "\n".join(",".join(str(c) for c in row) for row in rows) + "\n"
    _trace_all(_write(text.encode("utf-8", "surrogatepass"), ".csv"), "auto")


@SETTINGS
@given(st.binary(max_size=200))
def test_decode_and_parse_never_escape(data):
    try:
        parse_yaml(decode(data, "x.yaml"), "x.yaml")
    except AdvisorError:
        pass
