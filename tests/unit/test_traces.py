"""Trace files in our JSONL, Mooncake's JSONL and Azure's CSV. Every file here is written by the
test with made-up numbers in the published layouts; none is a copy of a real trace."""

import json
import math
import random

import pytest

from advisor.workload.plan import plan
from advisor.workload.spec import WorkloadError
from advisor.workload.traces import detect_format, load_trace, trace_requests, trace_to_workload


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


OURS = [
    {"timestamp": 100.0, "prompt_tokens": 120, "output_tokens": 30, "prefix_id": "sys-a", "prefix_tokens": 64},
    {"timestamp": 100.5, "prompt_tokens": 300, "output_tokens": 12, "prefix_id": "sys-a", "prefix_tokens": 64},
    {"timestamp": 101.25, "prompt_tokens": 80, "output_tokens": 200},
    {"timestamp": 103.0, "prompt_tokens": 950, "output_tokens": 5, "prefix_id": 7},
]
MOONCAKE = [
    {"timestamp": 0, "input_length": 1500, "output_length": 40, "hash_ids": [0, 1, 2]},
    {"timestamp": 0, "input_length": 1200, "output_length": 12, "hash_ids": [0, 1, 3]},
    {"timestamp": 2500, "input_length": 700, "output_length": 90, "hash_ids": [4, 5]},
    {"timestamp": 4000, "input_length": 600, "output_length": 8, "hash_ids": [0, 6]},
]
AZURE_2023 = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:17:03.9799600,4808,10
2023-11-16 18:17:04.0319600,3180,8
2023-11-16 18:17:05.5319600,110,27
"""
AZURE_2024 = """TIMESTAMP,ContextTokens,GeneratedTokens
2024-05-10 00:00:00.009930+00:00,1200,40
2024-05-10 00:00:01.509930+00:00,90,300
"""


def test_our_jsonl(tmp_path):
    t = load_trace(write_jsonl(tmp_path / "trace.jsonl", OURS))
    assert t.format == "jsonl" and t.out_of_order == 0
    assert [r.at_s for r in t.records] == [0.0, 0.5, 1.25, 3.0]
    assert [r.prompt_tokens for r in t.records] == [120, 300, 80, 950]
    assert [r.prefix_id for r in t.records] == ["sys-a", "sys-a", None, "7"]
    assert t.prefix_groups() == {"sys-a": 0, "7": 1}
    # Group 1 gives no length: half its shortest prompt.
    assert t.prefix_lengths() == {0: 64, 1: 475}


def test_iso_timestamps(tmp_path):
    rows = [{"timestamp": "2024-01-01T00:00:00Z", "prompt_tokens": 5, "output_tokens": 5},
            {"timestamp": "2024-01-01T00:00:02.5+00:00", "prompt_tokens": 5, "output_tokens": 5}]
    assert [r.at_s for r in load_trace(write_jsonl(tmp_path / "iso.jsonl", rows)).records] == [0.0, 2.5]


def test_mooncake(tmp_path):
    t = load_trace(write_jsonl(tmp_path / "conversation_trace.jsonl", MOONCAKE))
    assert t.format == "mooncake"
    assert [r.at_s for r in t.records] == [0.0, 0.0, 2.5, 4.0]  # milliseconds
    assert [r.prompt_tokens for r in t.records] == [1500, 1200, 700, 600]
    # [0,1] is shared by the first two (2 blocks of 512), [0] with the fourth; [4,5] by nobody.
    assert [r.prefix_id for r in t.records] == ["mooncake:0", "mooncake:0", None, "mooncake:0"]
    assert [r.prefix_tokens for r in t.records] == [1024, 1024, None, 512]
    assert t.prefix_lengths() == {0: 1024}


def test_azure_2023_and_2024(tmp_path):
    (tmp_path / "AzureLLMInferenceTrace_code.csv").write_text(AZURE_2023)
    t = load_trace(tmp_path / "AzureLLMInferenceTrace_code.csv")
    assert t.format == "azure"
    assert [round(r.at_s, 4) for r in t.records] == [0.0, 0.052, 1.552]
    assert [(r.prompt_tokens, r.output_tokens) for r in t.records] == [(4808, 10), (3180, 8), (110, 27)]
    (tmp_path / "week.csv").write_text(AZURE_2024)
    assert [r.at_s for r in load_trace(tmp_path / "week.csv").records] == [0.0, 1.5]


def test_auto_detection(tmp_path):
    assert detect_format(write_jsonl(tmp_path / "a.jsonl", OURS)) == "jsonl"
    assert detect_format(write_jsonl(tmp_path / "b.jsonl", MOONCAKE)) == "mooncake"
    (tmp_path / "c.txt").write_text(AZURE_2023)  # no .csv: the header tells
    assert detect_format(tmp_path / "c.txt") == "azure"
    assert load_trace(tmp_path / "c.txt").format == "azure"
    write_jsonl(tmp_path / "d.jsonl", [{"ts": 1, "len": 2}])
    with pytest.raises(WorkloadError, match=r"d.jsonl line 1: unknown trace format.*prompt_tokens.*input_length"):
        load_trace(tmp_path / "d.jsonl")
    # A format given explicitly wins over detection.
    with pytest.raises(WorkloadError, match="field input_length: missing"):
        load_trace(tmp_path / "a.jsonl", fmt="mooncake")


@pytest.mark.parametrize("bad, field, why", [
    ({"timestamp": 4, "prompt_tokens": 10, "output_tokens": "ten"}, "output_tokens",
     "expected a positive integer, got 'ten'"),
    ({"timestamp": 4, "prompt_tokens": 0, "output_tokens": 3}, "prompt_tokens", "expected a positive integer, got 0"),
    ({"timestamp": 4, "prompt_tokens": 2.5, "output_tokens": 3}, "prompt_tokens", "got 2.5"),
    ({"timestamp": 4, "prompt_tokens": True, "output_tokens": 3}, "prompt_tokens", "got True"),
    ({"timestamp": 4, "output_tokens": 3}, "prompt_tokens", "missing"),
    ({"timestamp": -1, "prompt_tokens": 3, "output_tokens": 3}, "timestamp", "got -1"),
    ({"timestamp": "yesterday", "prompt_tokens": 3, "output_tokens": 3}, "timestamp", "ISO-8601"),
    ({"timestamp": 4, "prompt_tokens": 3, "output_tokens": 3, "prefix_id": [1]}, "prefix_id", "string or an integer"),
    ({"timestamp": 4, "prompt_tokens": 3, "output_tokens": 3, "prefix_tokens": "x"}, "prefix_tokens", "positive integer"),
])
def test_malformed_jsonl_line_names_file_line_field(tmp_path, bad, field, why):
    rows = [{"timestamp": i, "prompt_tokens": 10, "output_tokens": 3} for i in range(6)] + [bad]
    path = write_jsonl(tmp_path / "trace.jsonl", rows)
    with pytest.raises(WorkloadError) as e:
        load_trace(path)
    assert f"trace.jsonl line 7: field {field}: " in str(e.value) and why in str(e.value)


def test_invalid_json_and_non_object_lines(tmp_path):
    path = write_jsonl(tmp_path / "trace.jsonl", [OURS[0], "{not json", OURS[1]])
    with pytest.raises(WorkloadError, match=r"trace.jsonl line 2: not valid JSON"):
        load_trace(path)
    path = write_jsonl(tmp_path / "list.jsonl", [OURS[0], "[1, 2]"])
    with pytest.raises(WorkloadError, match=r"list.jsonl line 2: expected a JSON object"):
        load_trace(path, fmt="jsonl")


def test_mixed_timestamp_kinds(tmp_path):
    rows = [OURS[0], {"timestamp": "2024-01-01T00:00:00Z", "prompt_tokens": 5, "output_tokens": 5}]
    with pytest.raises(WorkloadError, match="line 2: field timestamp: mixes ISO-8601"):
        load_trace(write_jsonl(tmp_path / "mixed.jsonl", rows))


@pytest.mark.parametrize("bad, field", [
    ({"timestamp": 10, "input_length": 100, "output_length": 0, "hash_ids": []}, "output_length"),
    ({"timestamp": 10, "input_length": 100, "output_length": 5, "hash_ids": "abc"}, "hash_ids"),
    ({"timestamp": "10", "input_length": 100, "output_length": 5, "hash_ids": []}, "timestamp"),
])
def test_malformed_mooncake_lines(tmp_path, bad, field):
    path = write_jsonl(tmp_path / "mc.jsonl", MOONCAKE + [bad])
    with pytest.raises(WorkloadError, match=rf"mc.jsonl line 5: field {field}: "):
        load_trace(path)


@pytest.mark.parametrize("line, field", [
    ("2023-11-16 18:17:06.0000000,abc,10", "ContextTokens"),
    ("2023-11-16 18:17:06.0000000,100,-3", "GeneratedTokens"),
    ("16/11/2023 18:17,100,3", "TIMESTAMP"),
])
def test_malformed_azure_lines(tmp_path, line, field):
    (tmp_path / "az.csv").write_text(AZURE_2023 + line + "\n")
    with pytest.raises(WorkloadError, match=rf"az.csv line 5: field {field}: "):
        load_trace(tmp_path / "az.csv")


def test_azure_bad_header_and_columns(tmp_path):
    (tmp_path / "h.csv").write_text("time,in,out\n2023-11-16 18:17:06,1,2\n")
    with pytest.raises(WorkloadError, match="h.csv line 1: expected the Azure header"):
        load_trace(tmp_path / "h.csv")
    (tmp_path / "cols.csv").write_text(AZURE_2023 + "2023-11-16 18:17:06.0,100\n")
    with pytest.raises(WorkloadError, match="cols.csv line 5: expected 3 columns"):
        load_trace(tmp_path / "cols.csv")


def test_empty_traces_are_errors(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(WorkloadError, match="empty.jsonl: the trace is empty"):
        load_trace(tmp_path / "empty.jsonl")
    (tmp_path / "header-only.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    with pytest.raises(WorkloadError, match="header-only.csv: the trace is empty"):
        load_trace(tmp_path / "header-only.csv")
    with pytest.raises(WorkloadError, match="cannot read"):
        load_trace(tmp_path / "missing.jsonl")


def test_out_of_order_timestamps_are_sorted_and_counted(tmp_path):
    rows = [{"timestamp": t, "prompt_tokens": 10 + i, "output_tokens": 3} for i, t in enumerate([5, 3, 4, 9, 1])]
    t = load_trace(write_jsonl(tmp_path / "late.jsonl", rows))
    assert [r.at_s for r in t.records] == [0, 2, 3, 4, 8]
    assert [r.line for r in t.records] == [5, 2, 3, 1, 4]
    assert t.out_of_order == 3 and "3 records out of time order" in t.notes[0]


def synthetic_trace(tmp_path, n=600, rate=5.0, cv=1.0, seed=3):
    rng = random.Random(seed)
    k = 1 / cv**2
    t, rows = 0.0, []
    for i in range(n):
        rows.append({"timestamp": round(t, 6), "prompt_tokens": rng.randint(20, 2000),
                     "output_tokens": rng.randint(5, 400), **({"prefix_id": f"g{i % 3}", "prefix_tokens": 16}
                                                                 if i % 4 == 0 else {})})
        t += rng.gammavariate(k, 1 / (rate * k))
    return load_trace(write_jsonl(tmp_path / "synthetic.jsonl", rows))


def test_exact_replay_keeps_times_lengths_and_groups(tmp_path):
    t = synthetic_trace(tmp_path)
    reqs = trace_requests(t)
    assert [(r.at_s, r.prompt_tokens, r.output_tokens) for r in reqs] == \
           [(x.at_s, x.prompt_tokens, x.output_tokens) for x in t.records]
    assert {r.prefix_group for r in reqs} == {None, 0, 1, 2}
    half = trace_requests(t, time_scale=0.5, max_requests=100)
    assert len(half) == 100 and [r.at_s for r in half] == [x.at_s * 0.5 for x in t.records[:100]]
    w = trace_to_workload(t)
    assert {r.bucket for r in reqs} <= {b.label for b in w.buckets}


def test_workload_from_a_trace_keeps_its_shape(tmp_path):
    t = synthetic_trace(tmp_path, n=900, rate=5.0, cv=1.0)
    w = trace_to_workload(t, seed=4)
    assert len(w.buckets) == 9 and w.requests == 900 and w.seed == 4
    assert sum(b.weight for b in w.buckets) == pytest.approx(1.0)
    # Tertiles: each prompt band holds about a third of the requests.
    bands = {}
    for b in w.buckets:
        bands[b.prompt_tokens] = bands.get(b.prompt_tokens, 0) + b.weight
    assert all(v == pytest.approx(1 / 3, abs=0.01) for v in bands.values())
    assert w.arrival.kind == "poisson" and w.arrival.rate == pytest.approx(5.0, rel=0.1)
    assert w.prefix.groups == 3 and w.prefix.tokens == 16 and w.prefix.share == pytest.approx(0.25, abs=0.01)
    assert "trace synthetic.jsonl" in w.source
    plan(w)  # a valid, plannable workload


def test_bursty_trace_gives_gamma(tmp_path):
    t = synthetic_trace(tmp_path, n=2000, rate=2.0, cv=3.0)
    w = trace_to_workload(t, time_scale=0.5)
    assert w.arrival.kind == "gamma"
    assert 1 / math.sqrt(w.arrival.burstiness) == pytest.approx(3.0, rel=0.15)
    assert w.arrival.rate == pytest.approx(4.0, rel=0.15)


def test_small_and_degenerate_traces(tmp_path):
    rows = [{"timestamp": i, "prompt_tokens": 100, "output_tokens": 10} for i in range(5)]
    w = trace_to_workload(load_trace(write_jsonl(tmp_path / "same.jsonl", rows)))
    assert [(b.prompt_tokens, b.output_tokens, b.weight) for b in w.buckets] == [((100, 100), (10, 10), 1.0)]
    assert w.arrival.kind == "poisson" and w.arrival.rate == pytest.approx(1.0)
    one = load_trace(write_jsonl(tmp_path / "one.jsonl", rows[:1]))
    with pytest.raises(WorkloadError, match="two distinct timestamps"):
        trace_to_workload(one)
    assert len(trace_requests(one)) == 1
