"""The planner (blocks and requests per block from measured noise), the stopping rule's looks, the
A/A calibration, and the family-wise error of the judge over simulated A/A data."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as st

from advisor.experiments.design import calibration
from advisor.experiments.judgement import judge as judgement
from advisor.experiments.design import planning
from advisor.experiments import stats
from advisor.experiments.design.plan import Stopping
from advisor.loadgen.record import RequestRecord

ALPHA = 0.05


def _blocks(rng, k, n, drift, sigma, ratio=1.0):
    return [(ratio * np.exp(rng.normal(0, drift) + rng.normal(0, sigma, n))).tolist() for _ in range(k)]


def _run_sequential(rng, plan: planning.Plan, drift: float, sigma: float, ratio: float) -> tuple[str, int]:
    """One simulated experiment judged as the runner judges it: a look after each pair of blocks."""
    k_max, n, stop = plan.max_blocks, plan.requests_per_block, plan.stopping
    a = _blocks(rng, k_max, n, drift, sigma)
    b = _blocks(rng, k_max, n, drift, sigma, ratio)
    verdict = "inconclusive"
    for k in range(1, k_max + 1):
        level = stop.level_at(k, k_max)
        if level is None:
            continue
        r = judgement.compare("ttft", a[:k], b[:k], statistic=plan.statistic, alpha=level, seed=k, n_boot=400)
        verdict = r.verdict
        if verdict != "inconclusive":
            return verdict, k
    return verdict, k_max


def _noise(drift, sigma, n, statistic="p50"):
    """The planner's noise for blocks of n log-normal(sigma) samples with block drift `drift`: the
    sampling SD of the log of a block's q-quantile is sqrt(q (1 - q)) / phi(z_q) sigma / sqrt(n)."""
    q = {"p50": 0.5, "p95": 0.95}[statistic]
    factor = math.sqrt(q * (1 - q)) / st.norm.pdf(st.norm.ppf(q))
    return planning.Noise(drift=drift, sampling=factor * sigma / math.sqrt(n), requests=n, source="test")


def test_planned_blocks_reach_the_power_they_promise():
    """Plan for a 30 % effect from the true noise; simulate experiments with that noise: the share of
    decisive, correct verdicts reaches the promised power (within simulation error)."""
    drift, sigma, n = 0.08, 0.5, 48
    plan = planning.plan("p50", _noise(drift, sigma, n), requests_per_block=n, effect=0.3)
    assert plan.power >= 0.8 and plan.max_blocks >= plan.stopping.first_look
    rng = np.random.default_rng(5)
    runs = 150
    hits = sum(_run_sequential(rng, plan, drift, sigma, 1.3)[0] == "regressed" for _ in range(runs))
    assert hits / runs >= 0.8 - 2.5 * math.sqrt(0.8 * 0.2 / runs), (hits, runs, plan.max_blocks)
    # more noise, more blocks
    noisier = planning.plan("p50", _noise(2 * drift, sigma, n), requests_per_block=n, effect=0.3)
    assert noisier.max_blocks > plan.max_blocks


def test_sequential_stops_early_on_a_large_effect_and_holds_alpha_on_aa():
    drift, sigma, n = 0.08, 0.5, 67
    plan = planning.plan("p95", _noise(drift, sigma, n, "p95"), requests_per_block=n, effect=0.3)
    rng = np.random.default_rng(6)
    big = [_run_sequential(rng, plan, drift, sigma, 0.5) for _ in range(40)]
    assert all(v == "improved" for v, _ in big)
    assert np.mean([k for _, k in big]) <= plan.max_blocks / 2, ([k for _, k in big], plan.max_blocks)
    runs = 200
    false = sum(_run_sequential(rng, plan, drift, sigma, 1.0)[0] in ("improved", "regressed") for _ in range(runs))
    assert false / runs <= st.binom.ppf(0.99, runs, ALPHA) / runs


def test_a_tail_primary_with_too_few_requests_is_refused_with_its_numbers():
    with pytest.raises(planning.PlanError) as e:
        planning.plan("p99", planning.conservative("p99"), requests_per_block=48, requests_fixed=True)
    text = str(e.value)
    assert "p99" in text and "48 requests per block give 1.4" in text and "at least 334" in text
    # not fixed: raised so that 10 samples per arm lie beyond it at the first look
    p = planning.plan("p99", planning.conservative("p99"), requests_per_block=48)
    assert p.sized_requests and p.requests_per_block * p.stopping.first_look * 0.01 >= planning.TAIL_SAMPLES
    assert any("raised" in line for line in p.describe())
    # a median needs no tail
    assert planning.plan("p50", planning.conservative("p50"), requests_per_block=20).requests_per_block == 20


def test_a_hopeless_plan_is_refused_and_a_given_maximum_is_kept():
    with pytest.raises(planning.PlanError, match="needs more than 24 blocks per arm"):
        planning.plan("p50", planning.Noise(0.6, 0.0, 32, "test"), requests_per_block=32, effect=0.1)
    p = planning.plan("p50", planning.conservative("p50"), requests_per_block=32, max_blocks=9)
    assert p.max_blocks == 9 and 0 < p.power <= 1


def test_looks_and_levels():
    s = planning.stopping("p50", 8)
    assert s.sequential and s.first_look >= stats.min_blocks_per_arm("p50")
    assert stats._moses_c(s.first_look, s.first_look, s.levels[0]) is not None, "the first look can decide"
    assert [s.level_at(k, 8) is not None for k in range(1, 9)] == [k >= s.first_look for k in range(1, 9)]
    assert all(a <= ALPHA for a in s.levels) and list(s.levels) == sorted(s.levels)
    fixed = planning.stopping("p50", 8, sequential=False)
    assert [fixed.level_at(k, 8) for k in range(1, 9)] == [None] * 7 + [ALPHA]
    one = planning.stopping("p95", 3)
    assert one.levels == (ALPHA,)
    assert "fixed horizon" in Stopping().describe(4)
    assert "Wang-Tsiatis" in s.describe(8) and "first decisive look" in s.describe(8)


def test_boundary_family_spends_alpha_and_orders_its_early_levels():
    obf, wt, poc = (stats.boundary_alphas(3, 12, ALPHA, b) for b in ("obrien-fleming", "wang-tsiatis", "pocock"))
    assert obf[0] < wt[0] < poc[0], "delta 0.25 sits between O'Brien-Fleming and Pocock at the first look"
    assert max(wt) < ALPHA


# --------------------------------------------------------------------------------------------
# calibration


def _records(values: list[float], start: float = 0.0) -> list[RequestRecord]:
    out = []
    for i, v in enumerate(values):
        t = start + i * 0.1
        out.append(RequestRecord(index=i, bucket="b", prompt_tokens=8, max_tokens=4, scheduled_s=t, sent_s=t,
                                 first_token_s=t + v, last_token_s=t + 2 * v, output_tokens=4, status="ok",
                                 chunk_s=[t + v, t + 1.3 * v, t + 1.7 * v, t + 2 * v]))
    return out


def test_calibration_recovers_the_drift_it_was_given(tmp_path):
    rng = np.random.default_rng(9)
    drift, sigma, n = 0.15, 0.3, 200
    by_block = {(arm, b): _records(_blocks(rng, 1, n, drift, sigma)[0]) for arm in ("baseline", "candidate")
                for b in range(12)}
    cal = calibration.measure("exp-x", "dep", "w", n, by_block)
    ttft = next(r for r in cal.readouts if (r.metric, r.statistic) == ("ttft", "p50"))
    expected_sampling = math.sqrt(math.pi / 2) * sigma / math.sqrt(n)
    assert ttft.blocks == 24
    assert 0.09 < ttft.drift_sd < 0.22, ttft
    assert 0.5 * expected_sampling < ttft.sampling_sd < 2 * expected_sampling
    assert {("output_tokens", "per_s"), ("ttft", "p95"), ("e2e", "p99")} <= {(r.metric, r.statistic)
                                                                             for r in cal.readouts}
    path = calibration.save(tmp_path, cal)
    again = calibration.load(tmp_path)
    assert again == cal and path.name == calibration.FILE
    noise = again.noise("ttft", "p50")
    assert noise.requests == n and "A/A calibration exp-x" in noise.source
    assert again.noise("ttft", "mean") is not None and again.noise("nope", "p50") is None


def test_no_calibration_is_none_and_a_broken_one_is_one_line(tmp_path):
    assert calibration.load(tmp_path) is None
    (tmp_path / calibration.FILE).write_text("{not json")
    with pytest.raises(calibration.CalibrationError, match="run advisor experiment --aa again"):
        calibration.load(tmp_path)


# --------------------------------------------------------------------------------------------
# family-wise error of the judge over A/A data


def test_familywise_error_over_primary_and_three_secondaries_at_most_alpha():
    """Four A/A readouts (all nulls true), the primary at alpha and three secondaries behind it: a
    false 'improved' or 'regressed' anywhere happens at most alpha of the time."""
    rng = np.random.default_rng(12)
    runs, k, n = 300, 6, 60
    false = 0
    for i in range(runs):
        results = []
        for m in range(4):
            a, b = _blocks(rng, k, n, 0.05, 0.5), _blocks(rng, k, n, 0.05, 0.5)
            results.append(judgement.compare(f"m{m}", a, b, statistic="p50", seed=i))
        judged = judgement.family(results[0], results[1:])
        false += any(r.verdict in ("improved", "regressed") for r in judged)
    assert false / runs <= st.binom.ppf(0.99, runs, ALPHA) / runs, false


def test_secondaries_behind_an_inconclusive_primary_are_not_tested():
    rng = np.random.default_rng(13)
    a, b = _blocks(rng, 6, 60, 0.05, 0.5), _blocks(rng, 6, 60, 0.05, 0.5)
    weak = judgement.compare("ttft", a[:2], b[:2])  # 2 blocks: never decisive
    strong = judgement.compare("tpot", a, [[v * 0.5 for v in blk] for blk in b])
    assert weak.verdict == "inconclusive" and strong.verdict == "improved"
    _, gated = judgement.family(weak, [strong])
    assert gated.verdict == "inconclusive" and gated.reason.startswith("not tested")
    assert gated.ratio == strong.ratio, "the estimate is still shown"


def test_a_plan_table_names_its_noise_even_where_the_plan_is_refused():
    from datetime import datetime, timezone

    from advisor.experiments.result import ReadoutNoise

    cal = calibration.Calibration(experiment="exp-noisy", deployment="d", measured_at=datetime.now(timezone.utc),
                                  workload="w", requests_per_block=24,
                                  readouts=[ReadoutNoise(metric="ttft", statistic="p50", block_sd=0.6, sampling_sd=0.05,
                                                         drift_sd=0.6, blocks=18)])
    rows = {(r.metric, r.statistic): r for r in planning.table(cal, 0.3, None)}
    noisy = rows[("ttft", "p50")]
    assert noisy.plan is None and "needs more than 24 blocks per arm" in noisy.problem
    assert noisy.noise.source.startswith("A/A calibration exp-noisy")
    assert rows[("ttft", "p95")].noise.source.startswith("conservative default"), "unmeasured readouts say so"
