"""The workload spec's validation, and the statistics of the request sets plan() draws from it.

Statistical checks run on fixed seeds, so they are deterministic; their thresholds are the ones a
fresh seed would pass with the stated probability (KS and chi-square at alpha 0.01, 3 sigma)."""

import math
import re
import statistics
from collections import Counter

import pytest
from scipy import stats

from advisor.workload.plan import plan
from advisor.workload.spec import Workload, WorkloadError, load_workload

GOOD = """
name: chat-mix
buckets:
  - {prompt_tokens: [100, 200], output_tokens: [10, 20], weight: 3}
  - {prompt_tokens: 800, output_tokens: [50, 60], weight: 1}
prefix: {groups: 2, tokens: 64, share: 0.5}
arrival: {kind: poisson, rate: 4}
cancellation: {rate: 0.1, after_tokens: [1, 4]}
duration_s: 30
seed: 7
"""


def workload(**kw) -> Workload:
    base = {"buckets": [{"prompt_tokens": [100, 200], "output_tokens": [10, 20]}],
            "arrival": {"kind": "poisson", "rate": 10}, "requests": 2000, "seed": 1}
    return Workload.model_validate({**base, **kw})


def test_a_good_file_loads(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text(GOOD)
    w = load_workload(path)
    assert w.buckets[1].prompt_tokens == (800, 800) and w.prefix.groups == 2 and w.source == "file w.yaml"


@pytest.mark.parametrize("text, field", [
    ("buckets: []\narrival: {rate: 1}\nrequests: 5\n", "buckets"),
    ("buckets: [{prompt_tokens: [10, 5], output_tokens: 4}]\narrival: {rate: 1}\nrequests: 5\n", "buckets.0"),
    ("buckets: [{prompt_tokens: 10, output_tokens: 4, weight: 0}]\narrival: {rate: 1}\nrequests: 5\n", "buckets.0.weight"),
    ("buckets: [{prompt_tokens: 10, output_tokens: 4}]\narrival: {kind: poisson}\nrequests: 5\n", "arrival"),
    ("buckets: [{prompt_tokens: 10, output_tokens: 4}]\narrival: {kind: gamma, rate: 1, burstiness: -1}\nrequests: 5\n",
     "arrival.burstiness"),
    ("buckets: [{prompt_tokens: 10, output_tokens: 4}]\narrival: {kind: concurrency}\nrequests: 5\n", "arrival"),
    ("buckets: [{prompt_tokens: 10, output_tokens: 4}]\narrival: {kind: fractal, rate: 1}\nrequests: 5\n", "arrival.kind"),
    ("buckets: [{prompt_tokens: 10, output_tokens: 4}]\narrival: {rate: 1}\n", "(top level)"),
    ("buckets: [{prompt_tokens: 10, output_tokens: 4}]\narrival: {rate: 1}\nrequests: 5\n"
     "prefix: {tokens: 20, share: 0.5}\n", "(top level)"),
    ("buckets: [{prompt_tokens: 10, output_tokens: 4}]\narrival: {rate: 1}\nrequests: 5\n"
     "prefix: {tokens: 2, share: 1.5}\n", "prefix.share"),
    ("buckets: [{prompt_tokens: 10, output_tokens: 4}]\narrival: {rate: 1}\nrequests: 5\n"
     "cancellation: {rate: 2}\n", "cancellation.rate"),
    ("buckets: [{prompt_tokens: 10, output_tokens: 4}]\narrival: {rate: 1}\nrequests: 5\nbatch_size: 3\n", "batch_size"),
])
def test_invalid_fields_are_named(tmp_path, text, field):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(WorkloadError) as e:
        load_workload(path)
    line = "" if field == "(top level)" else r".* \(line \d+\)"
    assert re.fullmatch(rf"{re.escape(str(path))}: field {re.escape(field)}: .+{line}", str(e.value)), str(e.value)


def test_field_error_names_its_line(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text("name: x\nbuckets:\n  - prompt_tokens: [100, 200]\n    output_tokens: 16\n"
                    "arrival:\n  kind: poisson\n  rate: -3\nrequests: 10\n")
    with pytest.raises(WorkloadError, match=r"w.yaml: field arrival.rate: .* \(line 7\)$"):
        load_workload(path)


def test_yaml_syntax_error_names_the_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("buckets:\n  - {prompt_tokens: [1, 2]\narrival: {rate: 1}\n")
    with pytest.raises(WorkloadError, match=r"broken.yaml: not valid YAML: .* \(line \d+, column \d+\)$"):
        load_workload(path)


def test_missing_file_and_non_mapping(tmp_path):
    with pytest.raises(WorkloadError, match="cannot read"):
        load_workload(tmp_path / "nope.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(WorkloadError, match="expected a mapping"):
        load_workload(tmp_path / "list.yaml")


def gaps(reqs):
    return [b.at_s - a.at_s for a, b in zip(reqs, reqs[1:])]


def test_poisson_gaps_are_exponential():
    reqs = plan(workload(requests=3000))
    g = gaps(reqs)
    assert len(g) >= 2000
    assert stats.kstest(g, "expon", args=(0, 1 / 10)).pvalue > 0.01


@pytest.mark.parametrize("burstiness", [0.25, 0.5, 4.0])
def test_gamma_gaps_have_the_cv_burstiness_implies(burstiness):
    g = gaps(plan(workload(requests=5000, arrival={"kind": "gamma", "rate": 10, "burstiness": burstiness})))
    cv = statistics.pstdev(g) / statistics.fmean(g)
    assert cv == pytest.approx(1 / math.sqrt(burstiness), rel=0.10)
    assert statistics.fmean(g) == pytest.approx(0.1, rel=0.10)


def test_constant_gaps_are_exact():
    reqs = plan(workload(requests=500, arrival={"kind": "constant", "rate": 8}))
    assert all(r.at_s == pytest.approx(r.index / 8, abs=1e-9) for r in reqs)


def test_duration_bounds_the_open_loop():
    reqs = plan(workload(requests=None, duration_s=100, arrival={"kind": "poisson", "rate": 20}))
    assert all(r.at_s < 100 for r in reqs)
    # Poisson count over 100 s at 20/s: mean 2000, sd ~45.
    assert abs(len(reqs) - 2000) < 3 * math.sqrt(2000)


def test_closed_loop_has_no_send_times():
    reqs = plan(workload(requests=50, arrival={"kind": "concurrency", "concurrency": 4}))
    assert len(reqs) == 50 and all(r.at_s is None for r in reqs)


def test_bucket_proportions_follow_the_weights():
    buckets = [{"name": n, "prompt_tokens": p, "output_tokens": 8, "weight": wt}
               for n, p, wt in (("short", 50, 5), ("mid", 500, 3), ("long", 1500, 2))]
    reqs = plan(workload(buckets=buckets, requests=4000))
    seen = Counter(r.bucket for r in reqs)
    expected = [4000 * wt / 10 for wt in (5, 3, 2)]
    assert stats.chisquare([seen["short"], seen["mid"], seen["long"]], expected).pvalue > 0.01
    assert {r.prompt_tokens for r in reqs if r.bucket == "long"} == {1500}


def test_lengths_stay_in_their_bucket_ranges():
    reqs = plan(workload(requests=1000))
    assert all(100 <= r.prompt_tokens <= 200 and 10 <= r.output_tokens <= 20 for r in reqs)


def test_same_seed_same_requests_other_seed_different():
    w = workload(prefix={"groups": 3, "tokens": 50, "share": 0.4}, cancellation={"rate": 0.2})
    assert plan(w) == plan(w)
    assert plan(w) != plan(w.model_copy(update={"seed": 2}))


def test_cancellations_at_the_configured_rate():
    n, p = 5000, 0.15
    reqs = plan(workload(requests=n, cancellation={"rate": p, "after_tokens": [2, 6]}))
    cancelled = [r for r in reqs if r.cancel_after_tokens is not None]
    assert abs(len(cancelled) - n * p) <= 3 * math.sqrt(n * p * (1 - p))
    assert all(2 <= r.cancel_after_tokens <= min(6, r.output_tokens) for r in cancelled)


def test_prefix_share_and_groups():
    n, share = 5000, 0.6
    reqs = plan(workload(requests=n, prefix={"groups": 4, "tokens": 50, "share": share}))
    grouped = [r.prefix_group for r in reqs if r.prefix_group is not None]
    assert abs(len(grouped) - n * share) <= 3 * math.sqrt(n * share * (1 - share))
    assert set(grouped) == {0, 1, 2, 3}
