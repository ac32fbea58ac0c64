"""The rule that stops an experiment whose verdict is out of reach (advisor/experiments/judgement/reach.py),
over simulated block sequences: where it stops, why it says it stopped, and where it must not."""

from __future__ import annotations

import pytest

from advisor.experiments.judgement import reach
from advisor.experiments.result import BlockRecord, ServerReadout


def block(arm: str, b: int, valid: bool, host: float | None = None, own: float | None = None,
          outside: int | None = None, waited: float | None = None) -> BlockRecord:
    return BlockRecord(arm=arm, block=b, requests=67, ok=67, errors=0, ttft_p50=0.1, tpot_p50=0.01, e2e_p95=1.0,
                       generator_valid=valid, why_invalid=None if valid else "scheduling lag p99 300 ms > 50 ms",
                       host_cpu_busy=host, generator_cpu=own, generator_waited=waited,
                       server=None if outside is None else ServerReadout(outside_requests=outside))


def first_stop(baseline: str, candidate: str, max_blocks: int = 13, **kw) -> tuple[int | None, str | None]:
    """Blocks per arm at which the rule stops ("1" valid, "0" invalid per block), and its reason;
    (None, None) when the run reaches its maximum."""
    blocks: list[BlockRecord] = []
    for k in range(max_blocks):
        blocks += [block("baseline", k, baseline[k] == "1", **kw), block("candidate", k, candidate[k] == "1", **kw)]
        if k + 1 < max_blocks and reach.shortfall(blocks):
            why = reach.out_of_reach(blocks, max_blocks)
            if why:
                return k + 1, why
    return None, None


def test_all_valid_never_stops():
    assert first_stop("1" * 13, "1" * 13) == (None, None)


def test_one_arm_mostly_invalid_stops_early_with_the_arm_the_cause_and_the_remedy():
    # The run: 11 of 13 baseline blocks invalid; it ran all 13.
    k, why = first_stop("0010000000100", "1" * 13, host=0.99, own=0.4)
    assert k == 7, k  # the run went on to 13; its second valid block came at the 11th
    assert first_stop("0000000000100", "1" * 13)[0] == 5  # the first block with a record to predict from
    assert why.startswith("cannot be judged: ") and "baseline" in why
    assert "this host's CPUs were 99% busy" in why and "starved it" in why
    assert "Remedy:" in why


def test_a_certain_shortfall_stops_even_where_the_prediction_would_wait():
    # 6 valid of the last 7 would be needed: after 8 blocks with 1 valid, 5 left can make at most 6.
    blocks = [b for k in range(8) for b in (block("baseline", k, k == 0), block("candidate", k, True))]
    why = reach.out_of_reach(blocks, 13)
    assert why and "at most 5 more can run" in why


def test_validity_recovering_late_is_not_stopped_while_it_can_still_make_it():
    # Two bad blocks first (a busy moment), then valid: enough valid blocks remain reachable.
    assert first_stop("0011111111111", "0111111111111") == (None, None)


def test_a_generator_that_waited_for_a_cpu_was_starved_whatever_the_hosts_average():
    _, why = first_stop("0000000000000", "0000000000000", host=0.55, own=0.2, waited=0.45)
    assert "it waited for a CPU 45% of the time (this host's CPUs were 55% busy)" in why and "starved it" in why


def test_a_generator_saturating_its_own_core_is_told_to_send_less():
    _, why = first_stop("0000000000000", "0000000000000", host=0.6, own=0.97)
    assert "its own process used 97% of a core" in why and "lower the rate or the concurrency" in why


def test_outside_traffic_on_the_baseline_points_at_a_fresh_baseline():
    _, why = first_stop("0000000000000", "1" * 13, outside=40)
    assert "outside traffic on that arm" in why and "--baseline fresh" in why


def test_a_guardrail_that_ends_the_run_first_counts():
    # Under the plan's 13 blocks this could recover; the request guardrail leaves 2 more per arm.
    blocks = [b for k in range(4) for b in (block("baseline", k, k == 0), block("candidate", k, True))]
    assert reach.out_of_reach(blocks, 13) is None
    left = reach.reachable(4, 13, sent=4 * 2 * 67, block_requests=67, max_requests=4 * 2 * 67 + 2 * 67,
                           elapsed_s=60, max_duration_s=3600)
    assert left == 5
    assert "at most 1 more can run" in reach.out_of_reach(blocks, left)


@pytest.mark.parametrize("elapsed, expected", [(60.0, 13), (600.0, 9), (1700.0, 3)])
def test_the_duration_guardrail_projects_from_the_pace_so_far(elapsed, expected):
    assert reach.reachable(3, 13, sent=0, block_requests=67, max_requests=10**6, elapsed_s=elapsed,
                           max_duration_s=1800) == expected


def test_the_predicted_chance_is_a_probability():
    assert reach.enough_chance(10, 0, 0, 5) == pytest.approx(1.0)
    assert 0 < reach.enough_chance(10, 7, 0, 4) < reach.enough_chance(10, 7, 2, 2) < 1
    assert reach.enough_chance(3, 4, 5, 0) == 0


def test_the_calibration_table_with_and_without_the_rule():
    """benchmarks/stats_calibration.py --validity, small: the same simulated runs with and without
    the rule; where every block is valid nothing changes, where the baseline is mostly invalid no
    verdict is lost and requests are saved."""
    import argparse
    import importlib.util

    from tests.support.servers import ROOT

    spec = importlib.util.spec_from_file_location("stats_calibration", ROOT / "benchmarks" / "stats_calibration.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    args = argparse.Namespace(statistic="p50", runs=20, requests=48, sigma=0.5, drift=0.08, outliers=0.03,
                              plan_effect=0.2, n_boot=200, seed=7)
    noise = bench.noise_of(args, bench.np.random.default_rng(8))
    plan = bench.planning.plan("p50", noise, requests_per_block=48, effect=0.2, sequential=True)
    table = bench.evaluate_validity(plan, args)
    for scenario in bench.SCENARIOS:
        without, with_ = table[f"{scenario} | without the rule"], table[f"{scenario} | with the rule"]
        assert with_["aa_false_verdict_rate"] <= without["aa_false_verdict_rate"]
        assert with_["mean_requests"] <= without["mean_requests"]
    assert table["all valid | with the rule"] == table["all valid | without the rule"]
    busy = "busy baseline (20 % valid)"
    assert table[f"{busy} | with the rule"]["mean_requests"] < 0.85 * table[f"{busy} | without the rule"]["mean_requests"]
    assert table[f"{busy} | with the rule"]["power_20pct"] == table[f"{busy} | without the rule"]["power_20pct"]


def test_an_arm_that_restarted_before_its_blocks_says_so_in_the_cause():
    blocks = []
    for k in range(5):
        b = block("candidate", k, False)
        blocks += [block("baseline", k, True), b.model_copy(update={"restart_s": 12.0} if k else {})]
    why = reach.cause(blocks, "candidate")
    assert "the candidate restarted before 4 of its blocks" in why, why
    assert "restarted" not in reach.cause(blocks, "baseline")
