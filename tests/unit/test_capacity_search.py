"""The capacity search on simulated deployments whose true capacity is known (advisor/capacity/
simulated.py: slots in front of a FIFO queue; the truth read from one long run per rate): how often
its interval covers the truth, what it costs in requests, and its answers at the edges (a ceiling
that holds, a floor that breaks, a budget spent)."""

from __future__ import annotations

import math
import random
import re

import pytest

from advisor.capacity import search as s
from advisor.capacity.result import CapacityResult, ObjectiveRow, TrialPoint, plan_peak
from advisor.capacity.simulated import Queue
from advisor.capacity.trials import CapacityInputError, objectives, tallies, trial_size, warmup_size
from advisor.diagnosis.slo import SLO
from advisor.loadgen.record import RequestRecord

TTFT = s.Objective("ttft_p95", 0.95, 1.0, "TTFT p95 <= 1 s")
# (slots, service-time spread): a sharp knee (8 slots, even service), a middling one, one slot with
# a heavy tail.
SHAPES = [(8, 0.3), (4, 0.5), (1, 0.8)]
SEEDS = 80
TALLIED = 200  # trials.trial_size's default
WARMUP = warmup_size(TALLIED)  # and the warmup the product sends before it: what is calibrated is what runs


def run_search(q: Queue, seed: int, **limits) -> s.Answer:
    rng = random.Random(seed)
    lim = {"start_rate": 0.5, "max_rate": 100.0, "min_rate": 0.01, **limits}
    return s.search(lambda r: q.trial(r, TALLIED, WARMUP, TTFT, rng), [TTFT], s.Limits(**lim))


@pytest.mark.parametrize("slots,sigma", SHAPES)
def test_the_interval_covers_the_true_capacity_at_its_stated_rate(slots, sigma):
    q = Queue(slots=slots, sigma=sigma)
    truth = q.true_capacity(TTFT)
    answers = [run_search(q, seed) for seed in range(SEEDS)]
    covered = sum((a.low or 0) <= truth <= (a.high or math.inf) for a in answers) / SEEDS
    errors = sorted(abs(a.estimate / truth - 1) for a in answers)
    requests = sum(a.requests for a in answers) / SEEDS
    print(f"\n{slots} slots, sigma {sigma}: truth {truth:.3g}/s, coverage {covered:.0%} (stated 90 %), "
          f"estimate within {errors[SEEDS // 2]:.1%} (median) / {errors[int(SEEDS * 0.9)]:.1%} (p90), "
          f"{requests:.0f} requests per answer")
    assert covered >= 0.85, covered
    assert errors[SEEDS // 2] < 0.10
    assert all(a.status in ("bounded", "noise-limited") for a in answers)


def test_the_warmup_is_calibrated_at_the_default_size_and_keeps_half_of_a_short_tally():
    assert trial_size([TTFT]) == TALLIED and warmup_size(TALLIED) == 25
    assert (warmup_size(60), warmup_size(86), warmup_size(100)) == (30, 43, 50)  # as before: half
    assert warmup_size(299) == 37 and warmup_size(1000) == 125 and warmup_size(4) == 10
    # Between the two, the warmup falls as the tally grows, and a trial never shrinks as its tally grows.
    sizes = range(100, 201)
    assert all(warmup_size(a) >= warmup_size(b) for a, b in zip(sizes, sizes[1:]))
    assert all(a + warmup_size(a) <= b + warmup_size(b) + 1 for a, b in zip(sizes, sizes[1:]))


def test_a_deployment_that_holds_at_the_ceiling_is_at_least_the_ceiling():
    a = run_search(Queue(slots=8, sigma=0.3), 1, max_rate=2.0)
    assert a.status == "at least" and a.low == 2.0 and a.high is None and a.estimate == 2.0


def test_a_deployment_that_breaks_at_the_floor_has_capacity_zero_said_not_raised():
    slow = Queue(slots=1, mean_service_s=20.0, sigma=0.3)  # every request takes 20 s: TTFT 2 s at best
    a = run_search(slow, 1, start_rate=0.05, min_rate=0.01)
    assert a.status == "zero" and a.low is None and a.high == 0.01 and a.estimate == 0.0
    assert a.binding == "ttft_p95"


def test_a_spent_budget_is_a_partial_answer_with_what_is_known():
    a = run_search(Queue(slots=4, sigma=0.5), 3, max_requests=1500)
    assert a.status == "partial" and "request budget" in a.stopped
    assert a.requests >= 1500 and a.low is not None  # what held so far is kept, with the break unknown or found


def test_the_search_reuses_unclear_trials_by_extending_them():
    a = run_search(Queue(slots=4, sigma=0.5), 0)
    extended = [t for t in a.trials if t.extended]
    assert extended and all(t.tallies["ttft_p95"].n > TALLIED for t in extended)


def test_a_queue_s_correlation_is_counted_even_when_every_request_met_the_objective():
    q = Queue(slots=8, sigma=0.3)
    busy = q.trial(6.5, 300, 100, TTFT, random.Random(4)).tallies["ttft_p95"]
    idle = q.trial(1.0, 300, 100, TTFT, random.Random(4)).tallies["ttft_p95"]
    assert busy.tau > 3 * idle.tau, (busy.tau, idle.tau)


def test_a_wander_of_milliseconds_under_a_one_second_slo_is_not_a_backlog():
    """The live CPU vLLM's low-rate trials: every TTFT 12-39 ms against 1 s, wandering together. Read
    from the raw values that wander made 86 requests worth 24-57, so each such trial was unclear and
    extended twice. Below a tenth of the threshold (CORRELATION_FLOOR) values count as equal: the
    trial passes on its 86. The same wander scaled to the threshold's own range (a backlog) keeps its
    correlation, and the trial stays unclear."""
    rng = random.Random(2)
    wander, level = [], 0.0
    for _ in range(86):
        level = 0.9 * level + rng.gauss(0, 1)
        wander.append(level)
    lo, hi = min(wander), max(wander)
    small = [0.012 + 0.027 * (w - lo) / (hi - lo) for w in wander]  # 12-39 ms
    large = [0.3 + 0.6 * (w - lo) / (hi - lo) for w in wander]  # 300-900 ms: all within 1 s as well
    assert s.autocorrelation_time(small) > 3, "the raw values are correlated"
    quiet, busy = s.tally([True] * 86, small, 1.0), s.tally([True] * 86, large, 1.0)
    assert quiet.tau == 1.0 and s.judge({"ttft_p95": quiet}, [TTFT], s.ALPHA) == ("pass", None)
    assert busy.tau > 3 and s.judge({"ttft_p95": busy}, [TTFT], s.ALPHA) == ("unclear", "ttft_p95")
    # Only the values above the floor carry the wander: the same small one under a 0.1 s SLO counts.
    assert s.tally([True] * 86, small, 0.1).tau > 1.5


def test_an_slo_file_without_a_latency_slo_gives_nothing_to_search_for():
    with pytest.raises(CapacityInputError, match="sets no latency SLO"):
        objectives(SLO(error_rate=0.02), {"error_rate"})
    names = [o.name for o in objectives(SLO(ttft_p95=0.5, error_rate=0.02), {"ttft_p95", "error_rate"})]
    assert names == ["ttft_p95", "error_rate"]
    everything = objectives(SLO(), None)
    assert [(o.name, o.share) for o in everything] == [("ttft_p95", 0.95), ("tpot_p95", 0.95), ("e2e_p99", 0.99),
                                                       ("error_rate", 0.99)]


def test_tallies_count_a_failure_as_outside_every_latency_slo_and_tpot_only_where_defined():
    def rec(i, ttft, tokens=10, status="ok"):
        r = RequestRecord(i, "b", 10, tokens, 0.0, sent_s=float(i), status=status)
        if status != "error":
            r.first_token_s = r.sent_s + ttft
            r.chunk_s = [r.first_token_s + 0.01 * k for k in range(tokens)]
            r.last_token_s = r.chunk_s[-1]
            r.output_tokens = tokens
        return r

    objs = objectives(SLO(ttft_p95=0.5, tpot_p95=0.05), {"ttft_p95", "tpot_p95"})
    t = tallies([rec(0, 0.1), rec(1, 0.9), rec(2, 0.1, tokens=1), rec(3, 0, status="error")], objs)
    assert (t["ttft_p95"].within, t["ttft_p95"].n) == (2, 4)
    assert (t["tpot_p95"].within, t["tpot_p95"].n) == (2, 3), "a one-token answer has no TPOT"


def test_the_plan_for_a_peak_carries_the_interval_and_the_price():
    r = CapacityResult(target="t", model="m", workload="w", started_at="2026-12-05T00:00:00Z",
                       objectives=[ObjectiveRow(name="ttft_p95", label="TTFT p95 <= 1 s", share=0.95, threshold_s=1)],
                       status="bounded", level=0.9, width_goal=0.1, low=4.0, high=5.0, estimate=4.5,
                       binding="ttft_p95", requests=1000, seconds=100, trial_requests=200, warmup_requests=100,
                       trials=[TrialPoint(rate=4.0, requests=300, seconds=60, outcome="pass", decided_by=None,
                                          extended=0, valid=True, shares={}, bounds={}, tallied={},
                                          output_tokens_per_s=400.0)])
    p = plan_peak(r, peak=36.0, headroom=0.8, per_hour=2.0, currency="USD", units=1)
    assert p.replicas == 10 and p.replicas_range == (9, 12)  # 36 / (4.5, 5, 4 x 0.8)
    assert p.monthly_cost == pytest.approx(10 * 2.0 * 730)
    assert p.per_million_output_tokens == pytest.approx(2.0 / 3600 / 400.0 * 1e6)


def test_the_command_refuses_bad_input_in_one_line_before_sending_anything(tmp_path):
    from typer.testing import CliRunner

    from advisor.cli import app

    slo = tmp_path / "slo.yaml"
    slo.write_text("error_rate: 0.02\n")
    w = tmp_path / "w.yaml"
    w.write_text("buckets: [{name: a, prompt_tokens: [10, 20], output_tokens: [10, 20]}]\narrival: {rate: 1}\n")
    closed = "http://127.0.0.1:9"  # nothing listens: any request would fail, none is made
    cases = {("--slo", str(slo), "--workload", str(w)): "sets no latency SLO",
             ("--workload", str(w), "--width", "0.7"): "--width 0.7",
             ("--workload", str(w), "--from-prom", closed): "exactly one of --workload",
             ("--workload", str(w), "--min-rate", "5", "--max-rate", "2"): "is not below --max-rate"}
    for args, said in cases.items():
        r = CliRunner().invoke(app, ["capacity", "--target", closed, *args])
        assert r.exit_code == 2 and said in r.output and len(r.output.strip().splitlines()) == 1, (args, r.output)


def test_an_invalid_trial_is_tried_again_and_a_host_that_never_keeps_up_ends_the_search_partial():
    q, rng = Queue(slots=4), random.Random(2)
    behind = iter([True, False])  # the first trial's load generator fell behind once

    def run(rate):
        got = q.trial(rate, TALLIED, WARMUP, TTFT, rng)
        if next(behind, False):
            got.valid, got.why_invalid = False, "fell behind its schedule"
        return got

    a = s.search(run, [TTFT], s.Limits(start_rate=0.5, max_rate=100.0, min_rate=0.01))
    assert a.status in ("bounded", "noise-limited") and not a.trials[0].valid
    assert a.trials[1].rate == a.trials[0].rate, "the same rate again"

    def never(rate):
        got = q.trial(rate, TALLIED, WARMUP, TTFT, rng)
        got.valid, got.why_invalid = False, "fell behind its schedule"
        return got

    a = s.search(never, [TTFT], s.Limits(start_rate=0.5, max_rate=100.0, min_rate=0.01))
    assert a.status == "partial" and len(a.trials) == 3 and "3 trials were invalid" in a.stopped


def test_the_terminal_and_markdown_reports_show_the_answer_every_trial_and_the_plan_as_text():
    """`advisor capacity` without --output json: the answer's line, each trial a row (its rate, its
    outcome and each objective's share), the goodput and the peak's plan; a target's and a workload's
    names shown as the text they are (a terminal escape never runs, markdown never renders)."""
    from datetime import datetime, timezone

    from advisor.capacity.result import result_of
    from advisor.reports import capacity_text

    answer = run_search(Queue(4, 0.5), seed=3)
    r = result_of(answer, [TTFT], target="http://h:1/\x1b[2J", model="m", workload="*bold* | pipe",
                  started_at=datetime(2026, 12, 6, tzinfo=timezone.utc), alpha=s.ALPHA, width=0.1,
                  trial_requests=TALLIED, warmup_requests=WARMUP)
    r.plan = plan_peak(r, peak=36.0, headroom=0.8, per_hour=2.0, currency="USD", units=1)
    text = capacity_text.text(r)
    assert r.summary in text and "TTFT p95 <= 1 s" in text and f"{len(r.trials)} trials" in text
    assert "\x1b" not in text and "\\x1b[2J" in text
    rows = [line for line in text.splitlines() if re.match(r"\s+[\d.]+\s+(pass|fail|unclear)", line)]
    assert len(rows) == len(r.trials), text
    for row, t in zip(rows, r.trials):
        assert t.outcome in row and f"{t.shares['ttft_p95']:.1%}" in row, (row, t)
    assert "peak 36 requests/s" in text and f"{r.plan.replicas} replica(s)" in text
    md = capacity_text.markdown(r)
    assert "\\*bold\\* \\| pipe" in md and "\x1b" not in md
    assert "## Planning for a peak of 36 requests/s" in md
    assert md.count("\n| ") == len(r.trials) + 1, "a header and a row per trial"


def test_an_interrupt_between_runs_at_one_rate_says_that_trial_before_it_propagates():
    """Ctrl-C while an unclear trial is being extended: its runs so far are said (on_trial) before the
    interrupt leaves the search, not whenever the search's generator is collected."""
    unclear = s.TrialResult(tallies={TTFT.name: s.Tally(190, 200)}, requests=300, seconds=10.0)
    runs, said = [], []

    def run(rate: float) -> s.TrialResult:
        runs.append(rate)
        if len(runs) == 2:
            raise KeyboardInterrupt
        return unclear

    try:
        s.search(run, [TTFT], s.Limits(start_rate=1.0, max_rate=10.0, min_rate=0.1), on_trial=said.append)
    except KeyboardInterrupt:
        when_caught = list(said)  # the traceback, and so the search's frame, still alive here
    assert [(t.rate, t.outcome, t.requests, t.extended) for t in when_caught] == [(1.0, "unclear", 300, 0)]


def test_an_unclear_trial_s_progress_line_says_what_its_requests_were_worth():
    """"unclear at 100.0 % within" reads as a bug without the reason: the latencies came in runs, so
    258 requests carried the evidence of about 11, too few to tell the share from 95 %."""
    from advisor.capacity.trials import trial_line

    ttft = s.Objective("ttft_p95", 0.95, 1.0, "TTFT p95 <= 1 s")
    runs = s.Trial(20.0, {"ttft_p95": s.Tally(258, 258, 23.5)}, 387, 19.0, extended=2)
    runs.outcome, runs.decided_by = s.judge(runs.tallies, [ttft], 0.0125)
    assert runs.outcome == "unclear"
    assert trial_line(runs, [ttft]).endswith(
        "unclear  TTFT p95 100.0% (+2 extensions): 258 requests carrying the evidence of 11 (their latencies "
        "come in runs), too few to tell from 95%")
    near = s.Trial(20.0, {"ttft_p95": s.Tally(83, 86, 1.0)}, 129, 6.0)
    near.outcome, near.decided_by = s.judge(near.tallies, [ttft], 0.0125)
    assert near.outcome == "unclear"
    assert trial_line(near, [ttft]).endswith("TTFT p95 96.5%: 86 requests, too few to tell from 95%")
    held = s.Trial(5.0, {"ttft_p95": s.Tally(86, 86, 1.0)}, 129, 26.0)
    held.outcome, held.decided_by = s.judge(held.tallies, [ttft], 0.0125)
    assert held.outcome == "pass" and trial_line(held, [ttft]).endswith("pass     TTFT p95 100.0%")


@pytest.mark.parametrize("throughput, want", [(8.0, 4.0), (1000.0, 50.0), (0.02, 0.05)])
def test_a_search_starts_at_half_the_burst_within_the_rate_bounds(monkeypatch, throughput, want):
    """Both front doors (the capacity command and the capacity readout) start here: half of what a
    closed-loop burst completed, never outside --min-rate/--max-rate."""
    from advisor.capacity import trials as tr

    monkeypatch.setattr(tr, "burst_throughput", lambda job: (throughput, 32))
    assert tr.burst_start(None, 0.05, 50.0) == (want, throughput, 32)


def test_a_tally_s_percentile_is_within_the_threshold_exactly_when_its_share_is():
    """The order statistic the estimate is fitted on agrees with the share the trial is judged by, at
    every size and share: a p95 at most the threshold means at least 95 % within."""
    rng = random.Random(5)
    for _ in range(400):
        n = rng.randint(1, 300)
        values = [rng.lognormvariate(0, 1) for _ in range(n)] + [math.inf] * rng.choice([0, 0, 1, 5])
        rng.shuffle(values)
        share, threshold = rng.choice([0.5, 0.9, 0.95, 0.99]), rng.uniform(0.2, 5)
        t = s.tally([v <= threshold for v in values], values, threshold)
        assert (t.quantile(share) <= threshold) == (t.share >= share), (n, share, threshold)
    assert s.Tally(3, 4).quantile(0.95) is None, "no values, no percentile"
    merged = s.tally([True] * 10, [0.1] * 10, 1.0).merged(s.tally([False] * 10, [2.0] * 10, 1.0))
    assert merged.quantile(0.5) == 0.1 and merged.quantile(0.55) == 2.0, "an extension's requests count"


def _trial(rate: float, p95: float, outcome: s.Outcome = "unclear") -> s.Trial:
    # 20 requests whose 19th (the p95) is p95 and whose 20th is a failure.
    values = [p95 * 0.5] * 18 + [p95, math.inf]
    return s.Trial(rate, {"ttft_p95": s.tally([v <= 1.0 for v in values], values, 1.0)}, 20, 1.0, outcome)


def test_the_estimate_is_where_the_fitted_percentile_meets_the_threshold_within_the_interval():
    # p95 = (rate / 5) ** 2 seconds: it meets the 1 s threshold at 5/s.
    trials = [_trial(r, (r / 5) ** 2) for r in (3.0, 4.0, 6.0, 7.0)] + [_trial(40.0, 64.0)]
    assert s._crossing(trials, TTFT, 3.0, 7.0) == pytest.approx(5.0)
    # The line is read only between the ends (40/s lies beyond them), and its answer is held there.
    assert s._crossing(trials, TTFT, 3.0, 4.0) == pytest.approx(4.0)
    # Latency that falls as the rate rises (noise) gives no line: the shares' crossing, else the middle.
    flat = [_trial(3.0, 1.2), _trial(6.0, 0.8)]
    assert s._crossing(flat, TTFT, 3.0, 6.0) == pytest.approx(math.sqrt(18))
    errors = s.Objective("error_rate", 0.99, None, "errors <= 0.01")
    assert s._fitted_crossing(trials, errors, 3.0, 7.0) is None, "the error rate has no latency to fit"


def test_the_report_and_the_progress_line_show_each_trial_s_measured_percentile():
    from datetime import datetime, timezone

    from advisor.capacity.result import result_of
    from advisor.capacity.trials import trial_line
    from advisor.reports import capacity_text

    t = _trial(4.0, 0.64)
    assert "TTFT p95 95.0% (p95 640.0 ms)" in trial_line(t, [TTFT])
    broke = s.Trial(9.0, {"ttft_p95": s.tally([False] * 5, [math.inf] * 5, 1.0)}, 5, 1.0, "fail")
    assert "(p95" not in trial_line(broke, [TTFT]), "no percentile where failures reach it"
    answer = s.Answer("bounded", 4.0, 9.0, 5.0, "ttft_p95", [t, broke], 25, 2.0)
    r = result_of(answer, [TTFT], target="t", model="m", workload="w", started_at=datetime.now(timezone.utc),
                  alpha=s.ALPHA, width=0.1, trial_requests=20, warmup_requests=10)
    assert [p.percentiles for p in r.trials] == [{"ttft_p95": 0.64}, {"ttft_p95": None}]
    assert "95.0% (p95 640.0 ms)" in capacity_text.text(r)
    assert TrialPoint.model_validate_json(r.trials[0].model_dump_json()).percentiles == {"ttft_p95": 0.64}


def test_the_fitted_estimate_is_closer_than_the_shares_crossing_at_a_wide_interval():
    """At the width a benchmark asks (0.2) the interval is wide and where the estimate falls in it
    matters: the percentile's line puts it nearer the truth than the shares' crossing, on the same
    searches."""
    q = Queue(slots=4, sigma=0.5)
    truth = q.true_capacity(TTFT)
    fitted, crossed = [], []
    for seed in range(SEEDS):
        a = run_search(q, seed, width=0.2)
        fitted.append(abs(a.estimate / truth - 1))
        for t in a.trials:
            t.tallies["ttft_p95"].values = []  # what the shares alone say
        crossed.append(abs(s._crossing(a.trials, TTFT, a.low, a.high) / truth - 1))
    median = lambda e: sorted(e)[len(e) // 2]  # noqa: E731
    print(f"\nwidth 0.2, 4 slots: median error {median(fitted):.1%} fitted, {median(crossed):.1%} from the shares")
    assert median(fitted) < 0.75 * median(crossed), (median(fitted), median(crossed))
