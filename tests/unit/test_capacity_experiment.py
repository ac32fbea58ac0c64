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
from advisor.capacity.trials import warmup_size
from advisor.experiments.design.capacity import CapacityPlanError, capacity_plan
from advisor.experiments.judgement.judge import judge_capacity
from advisor.experiments.run.capacity import Pair

TTFT = s.Objective("ttft_p95", 0.95, 1.0, "TTFT p95 <= 1 s")
ALPHA = 0.0125  # each end of each arm's interval: the ratio's at 95 % (design/capacity.py)
SEEDS = 40
TALLIED = 200  # a trial's default size, and the warmup the product sends before it
WARMUP = warmup_size(TALLIED)


def both(base: Queue, cand: Queue, seed: int, settle: bool = True, **limits):
    """The two searches stepped in turn by the runner's Pair, each on its own simulated arm; without
    settle, each search on its own to its width (what the Pair saves is measured against it)."""
    lim = s.Limits(**{"start_rate": 0.5, "max_rate": 100.0, "min_rate": 0.01, "alpha": ALPHA, **limits})
    queues = {"baseline": base, "candidate": cand}
    rngs = {arm: random.Random(f"{seed}:{arm}") for arm in queues}
    if settle:
        pair = Pair([TTFT], lim)
        while pair.pending:
            for arm in ("baseline", "candidate"):
                if arm in pair.pending:
                    pair.send(arm, queues[arm].trial(pair.pending[arm], TALLIED, WARMUP, TTFT, rngs[arm]))
        answers = pair.answered("not finished")
    else:
        answers = {arm: s.search(lambda rate, arm=arm: queues[arm].trial(rate, TALLIED, WARMUP, TTFT, rngs[arm]), [TTFT], lim)
                   for arm in queues}
    started = datetime.now(timezone.utc)
    return {arm: result_of(a, [TTFT], target=arm, model="m", workload="w", started_at=started, alpha=ALPHA,
                           width=0.1, trial_requests=TALLIED, warmup_requests=WARMUP) for arm, a in answers.items()}


def test_the_ratio_interval_covers_the_true_ratio_and_the_verdict_follows_it():
    width = 0.10
    base, cand = Queue(slots=2, sigma=0.5), Queue(slots=8, sigma=0.5)
    truth = cand.true_capacity(TTFT) / base.true_capacity(TTFT)
    runs = [both(base, cand, seed, width=width) for seed in range(SEEDS)]
    judged = [judge_capacity(r["baseline"], r["candidate"]) for r in runs]
    covered = sum(j.ci[0] <= truth <= j.ci[1] for j in judged) / SEEDS
    decided = sum(j.stop_reason.startswith("decided") for j in judged)
    spent = sorted(r["baseline"].requests + r["candidate"].requests for r in runs)[SEEDS // 2]
    full = sorted(sum(a.requests for a in both(base, cand, seed, settle=False, width=width).values())
                  for seed in range(SEEDS))[SEEDS // 2]
    print(f"\nwidth {width}: true ratio {truth:.3g}: covered {covered:.0%} (stated 95 %), "
          f"median ratio {sorted(j.ratio for j in judged)[SEEDS // 2]:.3g}; {decided}/{SEEDS} decided early; "
          f"median requests {spent} (to both widths: {full})")
    assert covered >= 0.9
    assert all(j.verdict == "improved" and j.ci[0] > 1 for j in judged), [(j.ratio, j.ci) for j in judged]
    # Both searches end once the verdict is decided, each arm bracketed: a finite interval, in fewer
    # requests than the searches take to reach their widths.
    assert decided >= SEEDS * 0.9 and all(j.ci is not None for j in judged)
    assert spent < full
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
        rate = walk.send(q.trial(rate, TALLIED, WARMUP, TTFT, rng))
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
    with pytest.raises(CapacityPlanError) as e:  # a trial that could never show the SLO holding
        capacity_plan(slo, trial_requests=60)
    assert "needs at least 86 requests to show TTFT p95 <= 500 ms holding" in str(e.value)
    assert capacity_plan(slo, trial_requests=86).trial_requests == 86


# --------------------------------------------------------------------------------------------
# the runner's own logic: the arms' trials in turn, alike draws, the restore whatever happens
# (a launcher that records what it is asked, trials from the simulated arms; the live run is
# measured in the README)


class RecordingLauncher:
    """The Launcher protocol, recording every call; the candidate falls ill after `ill_after` checks."""

    def __init__(self, ill_after: int | None = None):
        self.calls, self.starts, self.notes, self.ill_after, self.checks = [], 0, [], ill_after, 0

    def url(self, arm):
        return f"http://{arm}.invalid"

    def urls(self, arm):
        return [self.url(arm)]

    def bring_up(self, arm):
        self.calls.append(("bring_up", arm))
        return self.url(arm)

    def check(self, arm):
        if arm == "candidate":
            self.checks += 1
            if self.ill_after is not None and self.checks > self.ill_after:
                return "the candidate engine (pid 1) exited"
        return None

    def take_down(self, arm):
        self.calls.append(("take_down", arm))

    def restore(self):
        self.calls.append(("restore", None))
        return None

    def preflight(self):
        self.calls.append(("preflight", None))

    def found_state(self):
        return {}


def run_capacity_experiment(tmp_path, monkeypatch, launcher, start_rate=None):
    from advisor.capacity import trials as tr
    from advisor.experiments.arms.journal import Journal
    from advisor.experiments.design.deployment import Deployment
    from advisor.experiments.run import capacity as runner
    from advisor.experiments.run.setup import design

    queues = {"http://baseline.invalid": Queue(slots=2), "http://candidate.invalid": Queue(slots=8)}
    draws = []

    def trial(self, rate):  # the simulated arm behind the job's target, one draw per trial of each arm
        draw = next(self._draw)
        draws.append((self.job.target.url, draw, rate))
        q = queues[self.job.target.url]
        return q.trial(rate, TALLIED, WARMUP, TTFT, random.Random(f"{self.job.target.url}:{draw}"))

    class Sizer:
        def prompts_for(self, reqs, workload, salt=""):
            return {r.index: "x" for r in reqs}

    monkeypatch.setattr(tr.LiveTrials, "__call__", trial)
    monkeypatch.setattr(tr, "burst_throughput", lambda job: (4.0, 32))
    monkeypatch.setattr(runner.runner, "warm_up", lambda *a, **k: None)
    dep = Deployment.model_validate({"name": "sim", "engine": "vllm", "model": "m", "launcher": "endpoints",
                                     "endpoints": {"baseline": "http://baseline.invalid",
                                                   "candidate": "http://candidate.invalid"}})
    slo = tmp_path / "slo.yaml"
    slo.write_text("ttft_p95: 1.0\n")
    from advisor.experiments.design.capacity import capacity_plan

    from advisor.experiments.design.plan import Guardrails

    d = design(dep, "max_num_seqs", "8", None, readout_signal="capacity",
               capacity=capacity_plan(slo, start_rate=start_rate),
               state=_state(), guardrails=Guardrails(max_duration_s=1e6, max_requests=10**6))
    lines = []
    result = runner.execute(d, launcher, Journal(tmp_path), lines.append, sizer_for=lambda url: Sizer())
    return result, draws, lines


def _state():
    from advisor.experiments.arms.engine_state import EngineState

    return EngineState(source="test")


def test_the_runner_alternates_the_arms_with_alike_draws_and_restores(tmp_path, monkeypatch):
    launcher = RecordingLauncher()
    r, draws, lines = run_capacity_experiment(tmp_path, monkeypatch, launcher)
    assert r.status == "finished" and r.verdict == "improved" and r.ci[0] > 1, (r.ratio, r.ci, r.reason)
    assert set(r.capacity) == {"baseline", "candidate"}
    # In turn while both search: A, B, A, B ...; trial k of each arm the same draw, at the same rate first.
    arms = [u.split("//")[1].split(".")[0] for u, _, _ in draws]
    both = min(len(r.capacity["baseline"].trials), len(r.capacity["candidate"].trials))
    assert arms[:2 * both] == ["baseline", "candidate"] * both
    per_arm = {arm: [(k, rate) for u, k, rate in draws if arm in u] for arm in ("baseline", "candidate")}
    assert [k for k, _ in per_arm["baseline"]] == list(range(len(per_arm["baseline"])))
    assert [k for k, _ in per_arm["candidate"]] == list(range(len(per_arm["candidate"])))
    assert per_arm["baseline"][0][1] == per_arm["candidate"][0][1] == 2.0, "both start at half the burst"
    assert launcher.calls[0] == ("preflight", None) and launcher.calls[-1] == ("restore", None)
    # Capacities this far apart (2 slots against 8) are told apart before either search reaches +-10 %:
    # both end there, each with its interval so far, and the verdict says why it ended.
    assert any(line.startswith("both searches end: decided: the candidate held at") for line in lines), lines
    assert "decided" in {c.status for c in r.capacity.values()}
    assert r.judgement.stop_reason.startswith("decided: ") and r.capacity["candidate"].low > r.capacity["baseline"].high
    assert "\n" not in r.capacity["baseline"].summary
    # The markdown report: each arm's answer and trials, and no table of blocks (a capacity run has none).
    from advisor.reports import markdown, views

    md = markdown.experiment(views.experiment_view(r, charts_on=False))
    assert "## Capacity at the SLO per arm" in md and "Blocks, in run order" not in md, md
    first = r.capacity["baseline"].trials[0]
    assert f"- baseline: {first.rate:.3g}/s {first.outcome}" in md and "| candidate | capacity " in md, md


def test_a_start_rate_given_starts_both_searches_there_without_a_burst(tmp_path, monkeypatch):
    from advisor.capacity import trials as tr

    def no_burst(job):
        raise AssertionError("a start rate was given: no burst is sent")

    monkeypatch.setattr(tr, "burst_throughput", no_burst)
    launcher = RecordingLauncher()
    r, draws, lines = run_capacity_experiment(tmp_path, monkeypatch, launcher, start_rate=3.0)
    assert [rate for _, _, rate in draws[:2]] == [3.0, 3.0], draws[:2]
    assert "both searches start at 3 requests/s (--start-rate)" in lines, lines[:5]
    assert r.status == "finished" and r.verdict == "improved", (r.ratio, r.ci, r.reason)


def test_a_start_rate_outside_the_search_s_range_or_without_the_capacity_readout_is_refused(tmp_path):
    from advisor.app.experiment import ExperimentRequest, design
    from advisor.errors import AdvisorError

    slo = tmp_path / "slo.yaml"
    slo.write_text("ttft_p95: 1.0\n")
    with pytest.raises(CapacityPlanError) as e:
        capacity_plan(slo, start_rate=1e6)
    assert str(e.value) == "--start-rate 1e+06: expected a rate between 0.05 and 200 requests/s"
    assert "from 2.5 requests/s (--start-rate)" in capacity_plan(slo, start_rate=2.5).describe()[0]
    dep = tmp_path / "dep.yaml"
    dep.write_text("name: d\nengine: vllm\nmodel: m\nlauncher: endpoints\n"
                   "endpoints: {baseline: 'http://127.0.0.1:9', candidate: 'http://127.0.0.1:10'}\n")
    with pytest.raises(AdvisorError) as e:
        design(ExperimentRequest(deployment=dep, mechanism="max_num_seqs", value="8", start_rate=2.0))
    assert str(e.value).startswith("--start-rate is the first rate of --readout capacity's searches"), str(e.value)


def test_a_candidate_that_falls_ill_aborts_keeps_both_answers_so_far_and_restores(tmp_path, monkeypatch):
    launcher = RecordingLauncher(ill_after=3)
    r, draws, _ = run_capacity_experiment(tmp_path, monkeypatch, launcher)
    assert r.status == "aborted" and r.verdict == "inconclusive"
    assert r.aborted == "guardrail: the candidate engine (pid 1) exited" and r.reason.startswith("aborted: ")
    assert {c.status for c in r.capacity.values()} == {"partial"}
    assert launcher.calls[-1] == ("restore", None) and r.baseline_restored


def scripted(within: int) -> s.TrialResult:
    return s.TrialResult(tallies={TTFT.name: s.Tally(within, 200)}, requests=300, seconds=10.0)


def test_a_trial_the_decision_cuts_short_keeps_the_runs_it_made():
    """The verdict is decided by one arm's trial while the other arm is between two runs at one rate
    (an unclear trial being extended): that trial is kept, unclear, with the requests it sent."""
    passed, failed, unclear = scripted(200), scripted(0), scripted(190)  # 190/200: 95 % either side
    script = {"baseline": {1.0: passed, 2.0: failed}, "candidate": {1.0: passed, 2.0: passed, 4.0: passed, 8.0: failed}}
    said, lines = [], []
    pair = Pair([TTFT], s.Limits(start_rate=1.0, max_rate=100.0, min_rate=0.01, alpha=ALPHA),
                on_trial=lambda arm, t: said.append((arm, t.rate, t.outcome, t.extended)))
    while pair.pending:
        for arm in ("baseline", "candidate"):
            if arm in pair.pending:
                rate = pair.pending[arm]
                lines += pair.send(arm, script[arm].get(rate, unclear))
    answers = pair.answered("not finished")
    base = answers["baseline"]
    assert base.status == answers["candidate"].status == "decided", lines
    assert ("baseline", math.sqrt(2.0), "unclear", 1) in said, said  # two runs at 1.41/s, cut before a third
    assert base.requests == 4 * 300 and len(base.trials) == 3, (base.requests, base.trials)
    assert (base.low, base.high) == (1.0, 2.0)


def test_a_budget_smaller_than_one_trial_answers_partial_without_a_trial():
    pair = Pair([TTFT], s.Limits(start_rate=1.0, max_rate=100.0, min_rate=0.01, alpha=ALPHA, max_requests=0))
    assert not pair.pending
    answers = pair.answered("not finished")
    assert {a.status for a in answers.values()} == {"partial"} and all(not a.trials for a in answers.values())
    assert "request budget" in answers["baseline"].stopped


def test_a_request_budget_smaller_than_one_trial_per_arm_is_refused_before_anything_starts(tmp_path):
    from advisor.experiments.design.deployment import Deployment
    from advisor.experiments.design.plan import Guardrails
    from advisor.experiments.run.setup import DesignError, design

    dep = Deployment.model_validate({"name": "sim", "engine": "vllm", "model": "m", "launcher": "endpoints",
                                     "endpoints": {"baseline": "http://b.invalid", "candidate": "http://c.invalid"}})
    slo = tmp_path / "slo.yaml"
    slo.write_text("ttft_p95: 1.0\n")
    plan = capacity_plan(slo, trial_requests=86)
    n = plan.trial_requests + plan.warmup_requests
    with pytest.raises(DesignError) as e:
        design(dep, "max_num_seqs", "8", None, readout_signal="capacity", capacity=plan, state=_state(),
               guardrails=Guardrails(max_duration_s=600, max_requests=2 * n - 1))
    assert f"leaves each arm's search {n - 1} requests, less than one trial" in str(e.value)
    assert f"allow at least {2 * n}" in str(e.value) and "\n" not in str(e.value)
    d = design(dep, "max_num_seqs", "8", None, readout_signal="capacity", capacity=plan, state=_state(),
               guardrails=Guardrails(max_duration_s=600, max_requests=2 * n))
    assert d.guardrails.max_requests == 2 * n


def test_the_report_names_a_trial_whose_generator_fell_behind_invalid(tmp_path, monkeypatch):
    from advisor.reports import views

    r, _, _ = run_capacity_experiment(tmp_path, monkeypatch, RecordingLauncher())
    first = r.capacity["baseline"].trials[0]
    r.capacity["baseline"].trials[0] = first.model_copy(update={"valid": False, "outcome": "unclear"})
    [row] = [x for x in views.experiment_view(r, charts_on=False).capacity if x.arm == "baseline"]
    assert row.tried.startswith(f"{first.rate:.3g}/s invalid"), row.tried
