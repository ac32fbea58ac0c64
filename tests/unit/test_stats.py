"""Statistics of the A/B experiments, validated by simulation (fixed seeds) and on exact inputs.

Simulated data: per-request latencies are log-normal, log x = b_block + e, with e ~ N(0, SIGMA)
(SIGMA = 0.5: a coefficient of variation of about 53 %, heavy right tail) and a per-block random
effect b_block ~ N(0, sigma_b) that models drift between blocks. The default design is 6 blocks
x 200 requests per arm (p99 uses 6 x 400: only 1 % of the samples inform it). A/A runs must say
"improved" or "regressed" at most alpha plus binomial slack: the one-sided 99 % upper quantile of
Binomial(500, alpha) / 500 = 7.2 % (500 runs per A/A property). Power properties use 200 runs
(100 for the quiet no-change one). Bootstraps use the default n_boot = 2000.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as st

from advisor.experiments.judgement.judge import compare, sequential
from advisor.experiments.judgement.judge import family as judge
from advisor.experiments.result import MetricResult
from advisor.experiments.stats import MIN_SAMPLES, boundary_alphas, min_blocks_per_arm

ALPHA = 0.05
SIGMA = 0.5
RUNS = 200  # simulated experiments per power property
AA_RUNS = 500  # simulated experiments per A/A property
AA_SLACK = st.binom.ppf(0.99, AA_RUNS, ALPHA) / AA_RUNS  # 0.072: 99 % upper quantile of 500 draws
N_BOOT = 2000  # the default


def blocks(rng, k, m, sigma_b, ratio=1.0, sigma=SIGMA):
    return [(ratio * np.exp(rng.normal(0, sigma_b) + rng.normal(0, sigma, m))).tolist() for _ in range(k)]


def simulate(seed, k, m, sigma_b, ratio, statistics, runs=RUNS, lower_is_better=True, sigma=SIGMA):
    """Share of each verdict per statistic over `runs` simulated experiments."""
    rng = np.random.default_rng(seed)
    counts = {s: {} for s in statistics}
    for i in range(runs):
        a = blocks(rng, k, m, sigma_b, sigma=sigma)
        b = blocks(rng, k, m, sigma_b, ratio, sigma=sigma)
        for s in statistics:
            v = compare("ttft", a, b, statistic=s, lower_is_better=lower_is_better, seed=i,
                        n_boot=N_BOOT).verdict
            counts[s][v] = counts[s].get(v, 0) + 1
    return {s: {v: n / runs for v, n in c.items()} for s, c in counts.items()}


def false_rate(shares):
    return shares.get("improved", 0.0) + shares.get("regressed", 0.0)


# --------------------------------------------------------------------------------------------
# A/A: false verdicts at most alpha


@pytest.mark.parametrize(
    "seed, k, m, sigma_b, statistics",
    [
        (11, 6, 200, 0.05, ["p50", "p95", "p99"]),  # the default design, mild drift
        (12, 6, 100, 0.15, ["p50", "p95", "p99"]),  # strong drift: 15 % block-to-block
        (13, 4, 50, 0.10, ["p50", "p95", "p99"]),  # few, small blocks (p99 from 200 samples)
        (14, 3, 50, 0.10, ["p95", "p99"]),  # the fewest blocks the bootstrap accepts
    ],
)
def test_aa_false_improved_or_regressed_at_most_alpha(seed, k, m, sigma_b, statistics):
    shares = simulate(seed, k, m, sigma_b, 1.0, statistics, runs=AA_RUNS)
    for s in statistics:
        assert false_rate(shares[s]) <= AA_SLACK, (s, shares[s])


def test_pooled_per_request_mann_whitney_is_anticonservative_under_drift():
    """Why medians are ranked per block: pooled per-request ranks ignore the block correlation."""
    rng = np.random.default_rng(21)
    pooled = blocked = 0
    for _ in range(AA_RUNS):
        a = blocks(rng, 6, 100, 0.10)
        b = blocks(rng, 6, 100, 0.10)
        pooled += st.mannwhitneyu(np.log(np.concatenate(b)), np.log(np.concatenate(a))).pvalue < ALPHA
        blocked += compare("ttft", a, b).verdict in ("improved", "regressed")
    assert pooled / AA_RUNS > 3 * ALPHA  # measured 0.38
    assert blocked / AA_RUNS <= AA_SLACK


# --------------------------------------------------------------------------------------------
# power: a 20 % speed-up is "improved", a 1.25x slowdown "regressed"


@pytest.mark.parametrize(
    "seed, k, m, statistics",
    [(31, 6, 200, ["p50", "p95"]), (32, 6, 400, ["p99"])],
)
def test_twenty_percent_shift_detected_as_improved(seed, k, m, statistics):
    shares = simulate(seed, k, m, 0.05, 0.8, statistics)
    for s in statistics:
        assert shares[s].get("improved", 0) >= 0.80, (s, shares[s])
        assert shares[s].get("regressed", 0) == 0 and shares[s].get("no change", 0) == 0


@pytest.mark.parametrize(
    "seed, k, m, statistics",
    [(41, 6, 200, ["p50", "p95"]), (42, 6, 400, ["p99"])],
)
def test_slowdown_detected_as_regressed(seed, k, m, statistics):
    shares = simulate(seed, k, m, 0.05, 1.25, statistics)
    for s in statistics:
        assert shares[s].get("regressed", 0) >= 0.80, (s, shares[s])
        assert shares[s].get("improved", 0) == 0


def test_higher_is_better_throughput_mirrors_the_verdict():
    # per-request output tokens/s: the candidate 25 % faster is an improvement
    shares = simulate(51, 6, 100, 0.05, 1.25, ["mean", "p50"], lower_is_better=False)
    for s, share in shares.items():
        assert share.get("improved", 0) >= 0.80, (s, share)
        assert share.get("regressed", 0) == 0


def test_no_change_is_reachable_on_a_quiet_aa():
    # a steady deployment: per-request sigma 0.1, block drift 1 %; measured 100 % and 98 %
    shares = simulate(61, 6, 200, 0.01, 1.0, ["p50", "p95"], runs=100, sigma=0.1)
    assert shares["p50"].get("no change", 0) >= 0.80, shares
    assert shares["p95"].get("no change", 0) >= 0.80, shares
    shifted = simulate(62, 6, 200, 0.01, 0.8, ["p50", "p95"], runs=50, sigma=0.1)
    assert all(s.get("no change", 0) == 0 for s in shifted.values())


# --------------------------------------------------------------------------------------------
# exact small inputs


BASE = [[0.10, 0.12, 0.11, 0.13, 0.09], [0.11, 0.14, 0.10, 0.12, 0.13],
        [0.12, 0.10, 0.15, 0.11, 0.12], [0.10, 0.13, 0.12, 0.11, 0.14]]


@pytest.mark.parametrize("statistic", ["p50", "mean"])
def test_identical_arms_give_ratio_one(statistic):
    r = compare("ttft", BASE, [list(b) for b in BASE], statistic=statistic)
    assert r.ratio == pytest.approx(1.0)
    assert r.baseline_value == r.candidate_value
    assert r.ci[0] <= 1 <= r.ci[1]
    assert r.verdict in ("no change", "inconclusive")
    assert r.p_value == pytest.approx(1.0)


def test_identical_blocks_everywhere_are_exactly_no_change():
    same = [[1.0, 1.1, 1.2, 1.3, 1.4]] * 4
    for statistic in ("p50", "mean"):
        r = compare("ttft", same, same, statistic=statistic)
        assert r.verdict == "no change"
        assert r.ratio == pytest.approx(1.0) and r.ci == pytest.approx((1.0, 1.0))


def test_exact_scaling_gives_the_exact_ratio():
    half = [[0.5 * v for v in b] for b in BASE]
    r = compare("ttft", BASE, half, statistic="p50")
    assert r.ratio == pytest.approx(0.5)
    big = [[v * (1 + 0.001 * i) for i, v in enumerate(b * 30)] for b in BASE]  # 150 per block
    r95 = compare("ttft", big, [[0.5 * v for v in b] for b in big], statistic="p95")
    assert r95.ratio == pytest.approx(0.5)
    assert r95.candidate_value == pytest.approx(0.5 * r95.baseline_value)


def test_rank_ci_on_four_blocks_is_the_range_of_pairwise_differences():
    # 4 blocks per arm: the exact 95 % Moses interval is [min, max] of the 16 differences of the
    # log block medians (coverage 1 - 2/70), and full separation gives p = 2 / C(8, 4).
    base = [[1.0] * 10, [1.1] * 10, [1.2] * 10, [1.3] * 10]
    cand = [[0.5] * 10, [0.6] * 10, [0.7] * 10, [0.8] * 10]
    r = compare("ttft", base, cand)
    diffs = sorted(math.log(c) - math.log(b) for c in (0.5, 0.6, 0.7, 0.8) for b in (1.0, 1.1, 1.2, 1.3))
    assert r.ci == pytest.approx((math.exp(diffs[0]), math.exp(diffs[-1])))
    assert r.ratio == pytest.approx(math.exp(np.median(diffs)))
    assert r.p_value == pytest.approx(2 / 70)
    assert r.verdict == "improved"
    assert "lies below 1" in r.reason and "5% margin" in r.reason
    assert r.n_blocks == (4, 4) and r.n_samples == (40, 40)


def test_three_blocks_per_arm_cannot_reach_a_rank_verdict():
    base = [[1.0] * 10, [1.1] * 10, [1.2] * 10]
    cand = [[0.5] * 10, [0.6] * 10, [0.7] * 10]
    r = compare("ttft", base, cand)
    assert r.verdict == "inconclusive" and r.ci is None and r.ratio is not None
    assert "at least 4 blocks per arm" in r.reason
    assert min_blocks_per_arm("p50", 0.05) == 4
    assert min_blocks_per_arm("p50", 0.05 / 3) == 5
    assert min_blocks_per_arm("p95") == 3


def test_regressed_reason_and_margin():
    base = [[1.0] * 10, [1.1] * 10, [1.2] * 10, [1.3] * 10]
    slow = [[1.6] * 10, [1.7] * 10, [1.8] * 10, [1.9] * 10]
    r = compare("ttft", base, slow)
    assert r.verdict == "regressed" and "lies above 1" in r.reason
    # the same data is an improvement for a higher-is-better metric
    assert compare("tokens_per_s", base, slow, lower_is_better=False).verdict == "improved"
    # a significant change inside the margin is not a verdict
    tiny = [[v * 1.03 for v in b] for b in base]
    sep = [[1.0] * 10, [1.0001] * 10, [1.0002] * 10, [1.0003] * 10]
    r = compare("ttft", sep, [[v * 1.03 for v in b] for b in sep])
    assert r.ci[0] > 1 and r.verdict == "no change"  # CI [1.03, 1.03] sits inside [0.95, 1.05]
    r = compare("ttft", base, tiny)
    assert r.verdict == "inconclusive"


# --------------------------------------------------------------------------------------------
# missing data never passes


GOOD = [[1.0 + 0.01 * i for i in range(20)] for _ in range(6)]
FAST = [[0.5 * v for v in b] for b in GOOD]


def _with(blocks, i, j, value):
    out = [list(b) for b in blocks]
    out[i][j] = value
    return out


@pytest.mark.parametrize("statistic", ["p50", "p95", "p99", "mean"])
@pytest.mark.parametrize(
    "name, base, cand, says",
    [
        ("nan", GOOD, _with(FAST, 2, 3, float("nan")), "NaN"),
        ("none", _with(GOOD, 0, 0, None), FAST, "missing"),
        ("inf", GOOD, _with(FAST, 5, 19, float("inf")), "infinite"),
        ("one block", GOOD[:1], FAST, "at least 2"),
        ("no blocks", GOOD, [], "at least 2"),
        ("empty block", GOOD, FAST[:5] + [[]], "no samples"),
        ("too few samples", [[1.0] * 4, [1.0] * 4], [[0.5] * 4, [0.5] * 4], f"at least {MIN_SAMPLES}"),
        ("zero statistic", [[0.0] * 20] * 6, FAST, "is 0"),
        ("negative", _with(GOOD, 1, 1, -1.0), FAST, "negative"),
    ],
)
def test_missing_or_bad_data_is_inconclusive(statistic, name, base, cand, says):
    r = compare("ttft", base, cand, statistic=statistic)
    assert r.verdict == "inconclusive", (name, r.reason)
    assert says in r.reason, r.reason
    assert r.ci is None and r.p_value is None


def test_tail_needs_samples_beyond_the_percentile_and_three_blocks():
    small = [[1.0 + 0.01 * i for i in range(15)] for _ in range(6)]  # 90 per arm
    r = compare("ttft", small, [[0.5 * v for v in b] for b in small], statistic="p99")
    assert r.verdict == "inconclusive" and "needs at least 100" in r.reason
    two = [[1.0 + 0.01 * i for i in range(100)] for _ in range(2)]
    r = compare("ttft", two, [[0.5 * v for v in b] for b in two], statistic="p95")
    assert r.verdict == "inconclusive" and "falsely narrow" in r.reason


def test_bad_arguments_raise():
    with pytest.raises(ValueError):
        compare("ttft", GOOD, FAST, statistic="p90")
    with pytest.raises(ValueError):
        compare("ttft", GOOD, FAST, margin=0)
    with pytest.raises(ValueError):
        compare("ttft", GOOD, FAST, alpha=1.5)


def test_result_serialises():
    r = compare("ttft", GOOD, FAST)
    again = MetricResult.model_validate_json(r.model_dump_json())
    assert again.model_dump() == r.model_dump()


# --------------------------------------------------------------------------------------------
# Holm across secondaries


def _secondaries(seed=71):
    rng = np.random.default_rng(seed)
    out = []
    for i, ratio in enumerate([0.8, 1.0, 0.9, 1.3, 1.0, 0.85]):
        a, b = blocks(rng, 6, 100, 0.05), blocks(rng, 6, 100, 0.05, ratio)
        out.append(compare(f"m{i}", a, b, statistic=["p50", "p95"][i % 2], seed=i, n_boot=N_BOOT))
    return out


def test_holm_adjustment_is_monotone_and_never_below_raw_p():
    primary = compare("ttft", GOOD, FAST)
    secs = _secondaries() + [compare("broken", GOOD, _with(FAST, 0, 0, None))]
    out = judge(primary, secs)
    assert out[0].adjusted_p == primary.p_value and out[0].verdict == primary.verdict
    assert out[0].level == 0.95
    judged = out[1:]
    assert [r.metric for r in judged] == [r.metric for r in secs]
    assert judged[-1].verdict == "inconclusive" and judged[-1].adjusted_p is None
    pairs = sorted((r.p_value, j.adjusted_p) for r, j in zip(secs, judged) if r.p_value is not None)
    m = len(secs)
    running = 0.0
    for rank, (raw, adj) in enumerate(pairs, start=1):
        running = max(running, min(1.0, (m - rank + 1) * raw))
        assert adj == pytest.approx(running)
        assert adj >= raw
    adjusted = [adj for _, adj in pairs]
    assert adjusted == sorted(adjusted)


def test_holm_widens_cis_and_can_only_take_verdicts_away():
    primary = compare("ttft", GOOD, FAST)
    secs = _secondaries()
    judged = judge(primary, secs)[1:]
    for raw, adj in zip(secs, judged):
        assert adj.level >= raw.level  # the largest p is tested at alpha itself
        if raw.ci and adj.ci:
            assert adj.ci[0] <= raw.ci[0] + 1e-12 and adj.ci[1] >= raw.ci[1] - 1e-12
        if adj.verdict in ("improved", "regressed"):
            assert adj.verdict == raw.verdict and adj.adjusted_p <= ALPHA
        if raw.verdict == "inconclusive":
            assert adj.verdict == "inconclusive"
    assert any(j.verdict == "improved" for j in judged)  # a 20 % shift survives Holm


def test_holm_step_down_rejects_what_it_should():
    # three secondaries with 4 blocks per arm: the Holm levels (alpha/3, alpha/2, alpha) need 5, 5, 4
    sep_base = [[1.0] * 10, [1.1] * 10, [1.2] * 10, [1.3] * 10]
    sep_fast = [[0.5] * 10, [0.6] * 10, [0.7] * 10, [0.8] * 10]
    secs = [compare(f"m{i}", sep_base, sep_fast) for i in range(3)]
    assert all(s.verdict == "improved" for s in secs)
    judged = judge(compare("ttft", GOOD, FAST), secs)[1:]
    assert all(j.verdict == "inconclusive" for j in judged)
    assert all("Holm" in j.reason for j in judged)
    # a single secondary is tested at alpha: nothing changes
    (only,) = judge(compare("ttft", GOOD, FAST), secs[:1])[1:]
    assert only.verdict == "improved" and only.adjusted_p == secs[0].p_value


def test_holm_without_the_data_is_conservative():
    primary = compare("ttft", GOOD, FAST)
    sec = compare("e2e", GOOD, FAST)
    restored = MetricResult.model_validate(sec.model_dump())
    (out,) = judge(primary, [restored, compare("itl", GOOD, FAST)])[1:2]
    assert out.verdict == "inconclusive" and "not at hand to recompute the CI" in out.reason


def test_a_secondary_the_look_level_cannot_reach_says_how_many_blocks_it_needs():
    """A readout whose rank test cannot reach the look's level still carries its estimate, so that
    Holm says what is missing (more blocks), never that its data were lost."""
    base, cand = [[0.22], [0.21], [0.23], [0.22]], [[2.1], [2.14], [2.2], [2.0]]
    goodput = compare("goodput", base, cand, statistic="per_s", lower_is_better=False, alpha=0.01)
    assert goodput.verdict == "inconclusive" and goodput.ratio == pytest.approx(9.7, rel=0.05)
    primary = compare("ttft", GOOD, FAST, alpha=0.01)
    tokens = compare("output_tokens", base, cand, statistic="per_s", lower_is_better=False, alpha=0.01)
    for out in judge(primary, [goodput, tokens], alpha=0.01)[1:]:
        assert out.verdict == "inconclusive" and out.ratio == pytest.approx(9.7, rel=0.05)
        assert "run at least" in out.reason and "data" not in out.reason, out.reason


# --------------------------------------------------------------------------------------------
# sequential


def _stream(rng, k, m, ratio, sigma_b=0.05, pulled=None):
    for _ in range(k):
        if pulled is not None:
            pulled.append(1)
        a = np.exp(rng.normal(0, sigma_b) + rng.normal(0, SIGMA, m))
        b = ratio * np.exp(rng.normal(0, sigma_b) + rng.normal(0, SIGMA, m))
        yield a.tolist(), b.tolist()


def test_boundaries_spend_at_most_alpha():
    obf = boundary_alphas(4, 12, ALPHA, "obrien-fleming")
    poc = boundary_alphas(4, 12, ALPHA, "pocock")
    assert len(obf) == len(poc) == 9
    assert list(obf) == sorted(obf) and obf[-1] < ALPHA and obf[0] < 0.001
    assert len(set(poc)) == 1 and 0.01 < poc[0] < ALPHA
    assert boundary_alphas(4, 4, ALPHA, "pocock")[0] == pytest.approx(ALPHA, abs=0.002)


def test_sequential_aa_error_at_most_alpha():
    rng = np.random.default_rng(81)
    runs = [sequential("ttft", _stream(rng, 12, 50, 1.0), max_blocks=12) for _ in range(AA_RUNS)]
    false = sum(r.result.verdict in ("improved", "regressed") for r in runs) / AA_RUNS
    assert false <= AA_SLACK, false


def test_sequential_stops_early_and_reads_the_stream_lazily():
    rng = np.random.default_rng(82)
    used, detected = [], 0
    for _ in range(100):
        pulled = []
        r = sequential("ttft", _stream(rng, 12, 50, 0.8, pulled=pulled), max_blocks=12)
        assert len(pulled) == r.blocks_used == r.looks[-1].blocks
        used.append(r.blocks_used)
        detected += r.result.verdict == "improved"
    assert detected >= 80
    assert np.mean(used) < 10  # a fixed design would run all 12
    assert r.n_samples == (50 * r.blocks_used, 50 * r.blocks_used)


def test_sequential_short_stream_is_inconclusive():
    rng = np.random.default_rng(83)
    r = sequential("ttft", _stream(rng, 2, 50, 0.5), max_blocks=8)
    assert r.result.verdict == "inconclusive" and not r.decisive and r.blocks_used == 2
    assert r.looks == []
