import math
import random
from pathlib import Path

import pytest

from probes.errors import BadExposition
from probes.exposition import bucket_quantile, parse


def test_parses_real_capture(capture):
    s = parse(capture("metrics-queueing-t1"))
    assert s.series("vllm:num_requests_waiting") == {(("engine", "0"), ("model_name", "tiny-llama")): 6.0}
    buckets = [k for k in s.series("vllm:time_to_first_token_seconds_bucket")]
    assert any(dict(k)["le"] == "+Inf" for k in buckets)


@pytest.mark.parametrize("text, message", [
    ("", "empty"),
    ("<html><body>nginx</body></html>", "HTML"),
    ('vllm:num_requests_running{engine="0",model_name="tiny', "malformed"),
    ("this is not { an exposition", "malformed"),
])
def test_bad_text_gives_clear_error(text, message):
    with pytest.raises(BadExposition, match=message):
        parse(text)


def test_truncated_capture_keeps_what_parsed_or_fails_clearly(capture):
    text = capture("metrics-queueing-t1")
    cut = text[: text.index("vllm:cache_config_info{") + 40]
    with pytest.raises(BadExposition, match="malformed"):
        parse(cut)


def test_quantile_interpolates_like_prometheus():
    # 10 observations <= 1, 10 more <= 2: the median is the top of the first bucket.
    b = [(1.0, 10), (2.0, 20), (math.inf, 20)]
    assert bucket_quantile(0.5, b)[0] == pytest.approx(1.0)
    assert bucket_quantile(0.75, b)[0] == pytest.approx(1.5)
    assert bucket_quantile(0.25, b)[0] == pytest.approx(0.5)


def test_quantile_in_inf_bucket_is_a_noted_lower_bound():
    v, note = bucket_quantile(0.99, [(1.0, 1), (2.0, 2), (math.inf, 10)])
    assert v == 2.0 and "lower bound" in note


def test_quantile_without_observations_is_nan():
    assert math.isnan(bucket_quantile(0.5, [(1.0, 0), (math.inf, 0)])[0])
    assert math.isnan(bucket_quantile(0.5, [])[0])


def test_non_monotonic_buckets_are_repaired():
    v, _ = bucket_quantile(0.5, [(1.0, 10), (2.0, 8), (math.inf, 20)])
    assert 1.0 <= v <= 2.0


def test_bucket_bounds_name_the_bucket_the_quantile_is_interpolated_in():
    from probes.exposition import bucket_bounds

    b = [(1.0, 80), (2.5, 100), (math.inf, 100)]
    assert bucket_bounds(0.5, b) == (0.0, 1.0)
    assert bucket_bounds(0.95, b) == (1.0, 2.5)
    assert bucket_bounds(0.99, [(1.0, 1), (2.0, 2), (math.inf, 10)]) is None, "the +Inf bucket has no upper bound"
    assert bucket_bounds(0.5, [(1.0, 0), (math.inf, 0)]) is None


# --- the parser against prometheus_client's, whose rules it keeps -----------------------------------

def _by_prometheus_client(text):
    """(samples, types) as probes.exposition read them with prometheus_client's parser (before it
    had its own); None where that parser refused the text or found no sample."""
    from collections import defaultdict

    from prometheus_client.parser import text_string_to_metric_families

    out, types = defaultdict(dict), {}
    try:
        for family in text_string_to_metric_families(text):
            if family.type != "unknown":
                types[family.name] = family.type
            for s in family.samples:
                out[s.name].setdefault(tuple(sorted(s.labels.items())), float(s.value))
    except Exception:  # noqa: BLE001
        return None
    return (dict(out), types) if out else None


def _same(text):
    want = _by_prometheus_client(text)
    try:
        got = parse(text)
    except BadExposition:
        assert want is None, f"refused what prometheus_client read: {text!r}"
        return
    assert want is not None, f"read what prometheus_client refused: {text!r}"
    samples, types = want
    assert got.types == types
    assert set(got.samples) == set(samples)
    for name, series in samples.items():
        assert set(got.samples[name]) == set(series)
        for labels, v in series.items():
            w = got.samples[name][labels]
            assert w == v or (math.isnan(w) and math.isnan(v)), (name, labels)


@pytest.mark.parametrize("path", sorted(Path(__file__).parents[1].glob("fixtures/*/metrics*.txt")),
                         ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_real_captures_read_as_prometheus_client_reads_them(path):
    _same(path.read_text())


ODD_LINES = ['# HELP foo a "quoted" help', '# TYPE "a.b" counter', 'a.b_total 1', '# TYPE foo counter extra',
             'foo{a="1", b="2"} 3', 'foo\t1', 'foo 1 2', 'foo  1   2', 'foo{a="x\\\\y\\n\\"z"} 1', 'foo{a="1",} 2',
             'foo 1 # {a="b"} 2', 'foo {a="b"} 1', '#', '# TYPE', '# HELP', 'foo_created 1', '# TYPE foo_total counter',
             'foo_total 3', 'foo \xa01', '# HELP foo', 'foo{a="1"}1', 'foo{__name__="x"} 1', 'foo{a="1",a="2"} 1',
             '  foo 1  ', 'foo 1_0', 'foo{a=","} 1', 'foo{a="}"} 1', 'foo 1e400', 'foo ' + '9' * 400, 'foo -Inf',
             '# TYPE h histogram', 'h_bucket{le="1"} 1', 'h_count 1', 'h_sum 2', 'h 3', '# TYPE s summary', 's 1']


def test_odd_lines_read_as_prometheus_client_reads_them():
    for line in ODD_LINES:
        _same(line + "\n")
    rng = random.Random(11)
    for _ in range(3000):
        _same("\n".join(rng.choices(ODD_LINES, k=rng.randint(1, 8))) + "\n")
