"""The capacity readout of an experiment (`advisor experiment --readout capacity`): two arms'
searches judged as a ratio with an interval made of theirs (advisor/experiments/judgement/judge.py
judge_capacity). On simulated arms whose true capacities are known (advisor/capacity/simulated.py):
how often the ratio's interval covers the true ratio, and the verdicts; then the edges (an arm
unbounded, an abort) and the plan's bad input."""

from __future__ import annotations

import math
import random
from datetime import datetime, timezone

import pytest

from advisor.capacity import search as s
from advisor.capacity.result import result_of
from advisor.capacity.simulated import Queue
from advisor.experiments.design.capacity import CapacityPlanError, capacity_plan
from advisor.experiments.judgement.judge import judge_capacity

TTFT = s.Objective("ttft_p95", 0.95, 1.0, "TTFT p95 <= 1 s")
ALPHA = 0.0125  # each end of each arm's interval: the ratio's at 95 % (design/capacity.py)
SEEDS = 40


def both(base: Queue, cand: Queue, seed: int, **limits):
    """The two searches stepped in turn, as the runner does, each on its own simulated arm."""
    lim = s.Limits(**{"start_rate": 0.5, "max_rate": 100.0, "min_rate": 0.01, "alpha": ALPHA, **limits})
    walks = {arm: s.steps([TTFT], lim) for arm in ("baseline", "candidate")}
    queues = {"baseline": base, "candidate": cand}
    rngs = {arm: random.Random(f"{seed}:{arm}") for arm in walks}
    pending = {arm: next(w) for arm, w in walks.items()}
    answers = {}
    while pending:
        for arm in list(pending):
            got = queues[arm].trial(pending[arm], 200, 100, TTFT, rngs[arm])
            try:
                pending[arm] = walks[arm].send(got)
            except StopIteration as done:
                answers[arm] = done.value
                del pending[arm]
    started = datetime.now(timezone.utc)
    return {arm: result_of(a, [TTFT], target=arm, model="m", workload="w", started_at=started, alpha=ALPHA,
                           width=0.1, trial_requests=200, warmup_requests=100) for arm, a in answers.items()}


def test_the_ratio_interval_covers_the_true_ratio_and_the_verdict_follows_it():
    base, cand = Queue(slots=2, sigma=0.5), Queue(slots=8, sigma=0.5)
    truth = cand.true_capacity(TTFT) / base.true_capacity(TTFT)
    judged = [judge_capacity(r["baseline"], r["candidate"]) for r in (both(base, cand, seed) for seed in range(SEEDS))]
    covered = sum(j.ci[0] <= truth <= j.ci[1] for j in judged) / SEEDS
    print(f"\ntrue ratio {truth:.3g}: covered {covered:.0%} (stated 95 %), "
          f"median ratio {sorted(j.ratio for j in judged)[SEEDS // 2]:.3g}")
    assert covered >= 0.9
    assert all(j.verdict == "improved" and j.ci[0] > 1 for j in judged), [(j.ratio, j.ci) for j in judged]
    m = judged[0].metrics[0]
    assert (m.metric, m.statistic, m.lower_is_better, m.level) == ("capacity", "per_s", False, 0.95)
    assert judged[0].primary_metric == "capacity per_s"


def test_alike_arms_are_never_called_different():
    q = Queue(slots=4, sigma=0.5)
    judged = [judge_capacity(r["baseline"], r["candidate"]) for r in (both(q, q, seed) for seed in range(20))]
    assert all(j.verdict in ("no change", "inconclusive") for j in judged), [(j.verdict, j.ci) for j in judged]
    assert all(j.ci[0] <= 1 <= j.ci[1] for j in judged)


def test_a_candidate_that_holds_at_the_ceiling_where_the_baseline_broke_is_improved_with_an_open_interval():
    r = both(Queue(slots=1, sigma=0.5), Queue(slots=8, sigma=0.3), 3, max_rate=2.0)
    assert r["candidate"].status == "at least" and r["baseline"].high < 2.0
    j = judge_capacity(r["baseline"], r["candidate"])
    assert j.verdict == "improved" and j.ci is None  # the candidate's capacity has no upper bound
    assert "held beyond where the baseline broke" in j.reason


def test_an_aborted_run_is_inconclusive_and_keeps_the_answers_so_far():
    r = both(Queue(slots=2), Queue(slots=8), 1)
    j = judge_capacity(r["baseline"], r["candidate"], aborted="guardrail: the candidate died")
    assert j.verdict == "inconclusive" and j.reason == "aborted: guardrail: the candidate died"
    assert judge_capacity(None, None, aborted="could not start").verdict == "inconclusive"
    # A search ended from outside answers with its interval so far.
    kept, rng, q = [], random.Random(5), Queue(slots=2)
    walk = s.steps([TTFT], s.Limits(start_rate=0.5, max_rate=100.0, min_rate=0.01), on_trial=kept.append)
    rate = next(walk)
    while len(kept) < 3:
        rate = walk.send(q.trial(rate, 200, 100, TTFT, rng))
    a = s.partial(kept, [TTFT], "aborted: guardrail")
    assert a.status == "partial" and a.stopped == "aborted: guardrail" and len(a.trials) == 3
    assert a.requests == sum(t.requests for t in kept)
    assert (a.low, a.high) == (max((t.rate for t in kept if t.outcome == "pass"), default=None),
                               min((t.rate for t in kept if t.outcome == "fail"), default=None))


def test_the_plan_refuses_an_slo_file_without_a_latency_slo_in_one_line(tmp_path):
    slo = tmp_path / "slo.yaml"
    slo.write_text("error_rate: 0.01\n")
    with pytest.raises(CapacityPlanError) as e:
        capacity_plan(slo)
    assert "sets no latency SLO" in str(e.value) and "\n" not in str(e.value)
    slo.write_text("ttft_p95: 0.5\n")
    p = capacity_plan(slo)
    assert [o.name for o in p.objectives] == ["ttft_p95"] and p.trial_requests >= s.needed(0.95, p.alpha)
    assert math.isclose(p.alpha, 0.0125)
    with pytest.raises(CapacityPlanError):
        capacity_plan(slo, width=0.7)
