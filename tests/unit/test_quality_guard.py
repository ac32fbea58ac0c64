import math

import pytest

from advisor.experiments.judgement import quality
from advisor.experiments.judgement.judge import quality_overrule
from advisor.experiments.judgement.quality import Step
from tests.support.servers import fake_server


def seq(*keys, lp=-1.0, top=None):
    return [Step(k, lp, top or {}) for k in keys]


def test_the_prompt_set_is_a_few_hundred_distinct_prompts():
    assert 200 <= len(quality.PROMPTS) == len(set(quality.PROMPTS))
    assert all(p.strip() for p in quality.PROMPTS)


def test_identical_outputs_are_within_margin_with_a_zero_interval():
    base = [seq("a", "b"), seq("c"), seq("d", "e")]
    q = quality.compare(base, base)
    assert q.exact_match == 1.0 and q.token_agreement == 1.0 and "identical" in q.note
    assert q.logprob_diff == 0 and q.logprob_ci == (0, 0) and q.verdict == "within margin"


def test_token_agreement_counts_the_baseline_tokens_reproduced_before_the_first_divergence():
    # After "z" the candidate continues another text: its "d" is not an agreement.
    q = quality.compare([seq("a", "b", "c", "d"), seq("x")], [seq("a", "b", "z", "d"), seq("x")])
    assert q.exact_match == 0.5
    assert q.token_agreement == 3 / 5
    assert "1 of 2 greedy outputs differ" in q.note


def test_the_divergence_reads_the_baseline_token_from_the_candidates_top_k():
    base = [[Step("a", -1.0), Step("b", -0.5)], [Step("c", -2.0)]]
    cand = [[Step("a", -1.2), Step("z", -0.4, {"z": -0.4, "b": -0.9})], [Step("c", -2.0)]]
    q = quality.compare(base, cand)
    # prompt 1: (-1.2 - -1.0) at the shared token, (-0.9 - -0.5) at the divergence: mean -0.3
    assert q.logprob_diff == pytest.approx((-0.3 + 0.0) / 2)
    assert q.positions == 3


def test_a_baseline_token_outside_the_top_k_takes_the_kth_logprob_as_an_upper_bound():
    base = [[Step("b", -0.5)], [Step("c", -1.0)]]
    cand = [[Step("z", -0.4, {"z": -0.4, "y": -2.5})], [Step("c", -1.0)]]
    q = quality.compare(base, cand)
    assert q.logprob_diff == pytest.approx((-2.0 + 0.0) / 2)


def test_a_drop_past_the_margin_regresses_whatever_the_speed():
    base = [seq("a", "b", lp=-1.0) for _ in range(30)]
    cand = [[Step("a", -1.5 - 0.01 * i), Step("b", -1.5)] for i in range(30)]
    q = quality.compare(base, cand, margin=0.1)
    lo, hi = q.logprob_ci
    assert hi < -0.1 and q.verdict == "past margin"
    o = quality_overrule("improved", q)
    assert (o.by, o.was, o.verdict, o.reason) == ("quality", "improved", "regressed",
                                                   f"quality regressed past its margin: {q.note}")


def test_an_interval_across_the_margin_keeps_a_speed_up_from_being_called_an_improvement():
    base = [seq("a", lp=-1.0) for _ in range(4)]
    cand = [[Step("a", -1.0 + d)] for d in (-0.4, 0.2, -0.3, 0.1)]
    q = quality.compare(base, cand, margin=0.1)
    assert q.logprob_ci[0] < -0.1 < q.logprob_ci[1] and q.verdict == "unclear"
    o = quality_overrule("improved", q)
    assert o.verdict == "inconclusive" and "not shown within the margin" in o.reason
    assert quality_overrule("regressed", q) is None, "a slower candidate keeps its own verdict and reason"


def test_the_interval_is_a_t_interval_over_prompts():
    base = [seq("a", lp=-1.0) for _ in range(3)]
    cand = [[Step("a", -1.0 + d)] for d in (-0.1, 0.0, 0.1)]
    q = quality.compare(base, cand)
    half = 4.302653 * 0.1 / math.sqrt(3)  # t(0.975, 2) * sd / sqrt(n)
    assert q.logprob_ci == pytest.approx((-half, half), abs=1e-5)


def test_both_logprob_formats_are_read():
    llama = {"logprobs": {"content": [{"id": 7, "token": "x", "logprob": -0.5,
                                       "top_logprobs": [{"id": 7, "token": "x", "logprob": -0.5},
                                                        {"id": 9, "token": "x", "logprob": -0.7}]}]}}
    assert quality.steps(llama) == [Step("id:7", -0.5, {"id:7": -0.5, "id:9": -0.7})]
    openai = {"logprobs": {"tokens": ["token_id:7"], "token_logprobs": [-0.5],
                           "top_logprobs": [{"token_id:7": -0.5, "token_id:9": -0.7}]}}
    assert quality.steps(openai) == [Step("token_id:7", -0.5, {"token_id:7": -0.5, "token_id:9": -0.7})]
    assert quality.steps({"text": "ab"}) == [Step("a"), Step("b")]


def test_without_logprobs_there_is_no_interval_and_no_verdict():
    q = quality.compare([[Step("a")], [Step("b")]], [[Step("a")], [Step("c")]])
    assert q.logprob_ci is None and q.verdict is None and "no log-probabilities" in q.note
    assert quality_overrule("improved", q) is None


def test_greedy_reads_every_prompt():
    with fake_server("--tokens", "4") as url:
        outs = quality.greedy(url, "fake", prompts=quality.PROMPTS[:5], max_tokens=4)
    assert len(outs) == 5 and all(outs)
