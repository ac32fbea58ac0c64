import math

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
