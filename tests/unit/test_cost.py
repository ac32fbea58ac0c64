"""Cost per million output tokens and per thousand SLO-meeting requests (advisor/cost.py): the
figures against tokens/s and price worked by hand, for a diagnosis and an experiment; no price means
no cost, never a zero."""

import math

import pytest

from advisor.cost import (
    Price,
    PriceError,
    PriceSpec,
    Pricing,
    diagnosis_cost,
    experiment_cost,
    parse_price,
    price_for,
    slo_share_at_least,
    units_for,
)
from advisor.diagnosis.slo import SLO
from advisor.loadgen.record import RequestRecord
from probes.snapshot import GpuDevice, GpuStatus, Signal, Snapshot


def snap(**values) -> Snapshot:
    sigs = {k: Signal(name=k, value=v, unit="x", source="test") for k, v in values.items()}
    return Snapshot(target="http://prom", via="prometheus", window_s=60, signals=sigs)


@pytest.mark.parametrize("text, per_hour, per", [("2.5", 2.5, "accelerator"), ("0.8/host", 0.8, "host"),
                                                 ("3/accelerator", 3.0, "accelerator")])
def test_the_price_option(text, per_hour, per):
    p = parse_price(text)
    assert (p.per_hour, p.per) == (per_hour, per)


@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "2.5/gpu", "cheap", ""])
def test_a_bad_price_is_one_line(text):
    with pytest.raises(PriceError, match="expected a positive number"):
        parse_price(text)


def test_the_cli_price_wins_then_the_specs_in_order():
    spec, fleet = PriceSpec(per_hour=4.0, accelerators=2), PriceSpec(per_hour=9.0)
    assert price_for("1.5", (spec, "deployment spec d.yaml")).spec.per_hour == 1.5
    got = price_for(None, (None, "deployment spec"), (spec, "deployment spec d.yaml"), (fleet, "advisor.yaml"))
    assert got.source == "deployment spec d.yaml" and got.spec.accelerators == 2
    assert price_for(None, (None, "a"), (None, "b")) is None


def test_units_from_the_spec_the_host_or_the_gpus_seen():
    gpus = GpuStatus(available=True, source="nvml", devices=[GpuDevice(index=0), GpuDevice(index=1)])
    assert units_for(Price(spec=PriceSpec(per_hour=2, accelerators=4), source="s"), gpus).count == 4
    assert units_for(Price(spec=PriceSpec(per_hour=2, per="host"), source="s")).count == 1
    seen = units_for(Price(spec=PriceSpec(per_hour=2), source="s"), gpus)
    assert seen.count == 2 and "2 GPU(s) seen" in seen.source
    assert units_for(Price(spec=PriceSpec(per_hour=2), source="s"), None) is None


def test_the_slo_share_is_bounded_from_the_measured_percentiles():
    slo = SLO(ttft_p95=1.0, tpot_p95=0.1, e2e_p99=30.0, error_rate=0.01)
    # TTFT p99 within 1 s (99 %), TPOT only its p50 within 0.1 s (50 %), E2E p99 within 30 s (99 %), 1 % errors.
    share = slo_share_at_least({"ttft_p99": 0.8, "tpot_p50": 0.05, "tpot_p95": 0.2, "e2e_p99": 12.0,
                                "error_rate": 0.01}, slo)
    assert share == pytest.approx(1 - 0.01 - 0.5 - 0.01 - 0.01)
    assert slo_share_at_least({}, slo) is None
    assert slo_share_at_least({"ttft_p50": 5.0, "tpot_p50": 1.0, "e2e_p50": 99.0}, slo) == 0.0


def test_a_diagnosis_cost_worked_by_hand():
    s = snap(generation_tokens_per_s=500.0, request_rate=2.0, ttft_p99=0.5, tpot_p99=0.05, e2e_p99=10.0,
             error_rate=0.0)
    price = Price(spec=PriceSpec(per_hour=0.8, per="host"), source="--price-per-hour")
    cost, note = diagnosis_cost(s, SLO(), price)
    assert note is None and cost.units == 1 and cost.hourly == 0.8
    # 0.8 $/h over 500 tokens/s = 1.8 M tokens/h: 0.444 $ per million.
    assert cost.per_million_output_tokens == pytest.approx(0.8 / (500 * 3600) * 1e6)
    # Every SLO held at its p99: at least 97 % of 2 req/s met every SLO.
    assert cost.slo_share_at_least == pytest.approx(0.97)
    assert cost.per_thousand_slo_requests == pytest.approx(0.8 / (2.0 * 0.97 * 3600) * 1e3)
    line = cost.line()
    assert "$0.80 per host-hour x 1 (one host)" in line and "$0.44 per million output tokens" in line
    assert "at most $0.11 per thousand SLO-meeting requests (at least 97% of 2.00 req/s" in line


def test_no_price_no_cost_and_an_unknown_count_says_why():
    s = snap(generation_tokens_per_s=500.0)
    assert diagnosis_cost(s, SLO(), None) == (None, None)
    cost, note = diagnosis_cost(s, SLO(), Price(spec=PriceSpec(per_hour=2.5), source="--price-per-hour"))
    assert cost is None and "accelerator count is unknown" in note


def test_no_tokens_is_no_figure_not_a_zero():
    cost, _ = diagnosis_cost(snap(generation_tokens_per_s=0.0, request_rate=0.0),
                             SLO(), Price(spec=PriceSpec(per_hour=1, per="host"), source="x"))
    assert cost.per_million_output_tokens is None and cost.per_thousand_slo_requests is None
    assert cost.note == "no output tokens in the window"


def _block(tokens_per_request: int, n: int, seconds: float) -> list[RequestRecord]:
    """n requests spread evenly over `seconds`, each streaming for 0.3 s after a 50 ms first token
    (so that blocks last as long whatever their tokens), fast enough to meet the default SLOs."""
    out = []
    for i in range(n):
        t = i * seconds / n
        out.append(RequestRecord(index=i, bucket="b", prompt_tokens=8, max_tokens=tokens_per_request,
                                 scheduled_s=t, sent_s=t, first_token_s=t + 0.05,
                                 last_token_s=t + 0.35,
                                 output_tokens=tokens_per_request, status="ok"))
    return out


def compared(by_block, metric: str):
    """A throughput readout as the judgement compares it: each block's rate, higher is better."""
    from advisor.experiments.judgement import judge as judgement
    from advisor.experiments.design import readouts

    def arm(name):
        return [readouts.block_samples(recs, metric, "per_s") for (a, _), recs in sorted(by_block.items()) if a == name]

    return judgement.compare(metric, arm("baseline"), arm("candidate"), statistic="per_s", lower_is_better=False)


def test_an_experiment_cost_is_the_inverse_of_the_throughput_ratio():
    # The candidate serves twice the tokens per second in every block (each block lasts ~10 s).
    by_block = {}
    for b in range(4):
        by_block[("baseline", b)] = _block(32, 40 + b, 10.0)
        by_block[("candidate", b)] = _block(64, 40 + b, 10.0)
    price = Price(spec=PriceSpec(per_hour=3.0, per="host"), source="--price-per-hour")
    tokens = compared(by_block, "output_tokens")
    c = experiment_cost(Pricing(price=price, units=(1, 1), units_source="one host"), tokens,
                        compared(by_block, "goodput"))
    tok_b, tok_c = c.baseline.output_tokens_per_s, c.candidate.output_tokens_per_s
    assert (tok_b, tok_c) == (tokens.baseline_value, tokens.candidate_value), "the comparison's own medians"
    assert tok_c / tok_b == pytest.approx(2.0, rel=0.02)
    assert c.baseline.per_million_output_tokens == pytest.approx(3.0 / (tok_b * 3600) * 1e6)
    assert c.ratio == pytest.approx(1 / tokens.ratio) and c.ratio == pytest.approx(0.5, rel=0.03)
    lo, hi = c.ci
    assert (lo, hi) == pytest.approx((1 / tokens.ci[1], 1 / tokens.ci[0])) and lo <= c.ratio <= hi < 1
    assert c.level == tokens.level
    assert "candidate/baseline 0.5" in c.line()


def test_an_experiment_that_doubles_the_accelerators_costs_them():
    by_block = {(arm, b): _block(32, 40, 10.0) for arm in ("baseline", "candidate") for b in range(3)}
    price = Price(spec=PriceSpec(per_hour=2.0, accelerators=1), source="spec")
    c = experiment_cost(Pricing(price=price, units=(1, 2), units_source="spec"), compared(by_block, "output_tokens"),
                        compared(by_block, "goodput"))
    assert c.candidate.units == 2 and c.ratio == pytest.approx(2.0, rel=0.01)
    assert math.isclose(c.candidate.per_million_output_tokens, 2 * c.baseline.per_million_output_tokens, rel_tol=0.01)


def test_arm_pricing_counts_each_arms_accelerators_from_its_own_argv():
    from types import SimpleNamespace

    from advisor.experiments.design.arm_costs import arm_pricing

    d = SimpleNamespace(deployment=SimpleNamespace(launcher="endpoints", engine="vllm"), mechanism="tensor_parallel",
                        baseline_args=["--tensor-parallel-size", "2"], candidate_args=["--tensor-parallel-size=4"])
    price = Price(spec=PriceSpec(per_hour=2.0, accelerators=2), source="spec")
    pricing, note = arm_pricing(d, price)
    assert note is None and pricing.units == (2, 4) and pricing.price == price
    assert arm_pricing(d, None) == (None, None)
    pricing, note = arm_pricing(d, Price(spec=PriceSpec(per_hour=2.0), source="--price-per-hour"))
    assert pricing is None and "accelerator count is unknown" in note
