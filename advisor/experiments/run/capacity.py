"""Runs a capacity experiment (`--readout capacity`) against the real deployment: each arm searched
for its capacity at the SLO (advisor/capacity/search.py), the two searches' trials in turn, the
baseline restored and verified whatever happens. Both searches end early, before their widths,
once the verdict is decided (judge.capacity_settled): each arm bracketed and the ratio's interval
beyond the margin, which narrower arm intervals cannot undo.

Alike arms: both searches start at the same rate (half a closed-loop burst's throughput on the
baseline, or --start-rate), and trial k of either arm draws the same arrival times and the same
request order (LiveTrials with one seed), in its own prompt words of the same sizes: with the arms'
trials alternating (A, B, A, B ...; an arm whose search has ended leaves the other to go on alone), a
drift of the host hits both searches alike. An arm (re)started for its turn first gets the design's
warmup requests, unmeasured, as in the block runner.

Guardrails: the design's request and duration budgets are split between the arms (each search's
limits: it ends with a partial answer, its interval so far); the candidate's health is checked
during and after each trial, and an unhealthy candidate aborts the experiment (both arms' answers
so far are kept, as partial ones). The verdict is the judgement's (judge_capacity).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Generator, Sequence
from datetime import datetime, timezone

from advisor.capacity import search as s
from advisor.capacity import trials as tr
from advisor.capacity.result import CapacityResult, result_of
from advisor.experiments.arms.journal import Journal
from advisor.experiments.arms.protocol import Launcher, LaunchError
from advisor.experiments.design.plan import Design
from advisor.experiments.judgement import judge as judgement
from advisor.experiments.result import ExperimentResult
from advisor.experiments.run import runner
from advisor.loadgen.execute import Job
from advisor.loadgen.loop import run_load
from advisor.loadgen.runner import Target, run
from advisor.workload.prompts import PromptSizer, PromptSizingError

ARMS = ("baseline", "candidate")


def execute(design: Design, launcher: Launcher, journal: Journal, say: Callable[[str], None], *,
            sizer_for: Callable[[str], PromptSizer] | None = None) -> ExperimentResult:
    """As runner.execute, for a design with a capacity plan: raises LaunchError when refused,
    runner.NotStarted when the baseline or the prompts fail (target left as found),
    runner.KeyboardInterruptWithResult on an interrupt."""
    plan = design.capacity
    assert plan is not None, "a capacity experiment needs its plan"
    exp, objs = design.id, list(plan.objectives)
    sizer_for = runner.begin(design, launcher, journal, say, sizer_for)
    pair: Pair | None = None
    aborted: str | None = None
    not_started: str | None = None
    interrupted = False
    started_at = datetime.now(timezone.utc)
    guard = design.guardrails
    try:
        try:
            url = launcher.bring_up("baseline")
            sizer = sizer_for(url)
            job = Job(workload=design.workload, requests=list(design.requests),
                      prompts=sizer.prompts_for(design.requests, design.workload), target=_target(design, url, ()),
                      warmup_s=0.0, concurrency=None, duration_s=None, sizer=sizer)
        except (LaunchError, PromptSizingError) as e:
            not_started = str(e)
            raise runner.Aborted(f"could not start: {e}") from None
        if plan.start_rate is not None:
            start = plan.start_rate
            say(f"both searches start at {start:.3g} requests/s (--start-rate)")
        else:
            try:
                start, throughput, n = tr.burst_start(job, plan.min_rate, plan.max_rate)
            except tr.CapacityInputError as e:
                raise runner.Aborted(str(e)) from None
            say(f"a burst of {n} requests on the baseline, {tr.PROBE_CONCURRENCY} at a time, completed "
                f"{throughput:.3g}/s: both searches start at {start:.3g} requests/s")
        limits = plan.limits(start, guard.max_requests // 2, guard.max_duration_s / 2)
        pair = Pair(objs, limits, on_trial=lambda arm, t: say(f"{arm:9} {tr.trial_line(t, objs)}"))
        lives = {arm: _live(design, job, arm, launcher) for arm in ARMS}
        warm = runner.warmup_requests(design)
        warm_prompts = sizer.prompts_for(warm, design.workload, salt="warmup") if warm else {}
        cold = set(ARMS)
        while pair.pending:
            for arm in ARMS:
                if arm not in pair.pending:  # its search has ended (or the other arm's trial ended both)
                    continue
                starts = launcher.starts
                url = launcher.bring_up(arm)
                if launcher.starts != starts:
                    cold.add(arm)
                    say(f"{arm} (re)started")
                target = _target(design, url, launcher.urls(arm)[1:])
                if arm in cold:
                    if warm:
                        say(f"warming the {arm} up: {len(warm)} requests, not measured")
                    runner.warm_up(target, warm, warm_prompts, design.workload.arrival.concurrency or 4)
                    cold.discard(arm)
                live = lives[arm]
                live.job = dataclasses.replace(live.job, target=target)
                rate = pair.pending[arm]
                got = live(rate)
                journal.write(exp, "trial", arm=arm, rate=rate, requests=got.requests)
                problem = launcher.check(arm)
                if problem:
                    raise runner.Aborted(f"guardrail: {problem}")
                for line in pair.send(arm, got):
                    say(line)
    except runner.Aborted as e:
        aborted = str(e)
    except LaunchError as e:
        aborted = f"launch failed: {e}"
    except KeyboardInterrupt:
        aborted, interrupted = "interrupted", True
    finally:
        restored, note, signalled = runner.restore(launcher, journal, exp, say)
    if aborted:
        journal.write(exp, "aborted", reason=aborted)
    if not_started is not None and not signalled:
        raise runner.NotStarted(not_started if restored else f"{not_started}; {note}")
    interrupted = interrupted or signalled
    answers = pair.answered(aborted or "not finished") if pair else {}
    results = {arm: _result(design, a, arm, started_at, launcher) for arm, a in answers.items()}
    judged = judgement.judge_capacity(results.get("baseline"), results.get("candidate"), aborted=aborted)
    result = ExperimentResult(
        id=exp, deployment=design.deployment.name, mechanism=design.mechanism, value=repr(design.value),
        status="aborted" if aborted else "finished", judgement=judged, aborted=aborted,
        baseline_restored=restored, restore_note=note, fails_means=design.fails_means,
        server_notes=list(launcher.notes), models=design.models, capacity=results,
        kubernetes=dict(getattr(launcher, "info", None) or {}))
    if interrupted:
        raise runner.KeyboardInterruptWithResult(result)
    return result


class Pair:
    """The two arms' searches (advisor/capacity/search.py), stepped in turn by the caller; both end
    once the verdict is decided (judge.capacity_settled). Pure: it runs no trial.

    (Measured and not kept: once both arms were bracketed and undecided, probing each just past the
    other's end, 1.25x, instead of its bracket's middle. On simulated queues of 2 slots against 3
    and 4, and 4 against 4, 20 seeds each, it decided no more often and spent as many requests or
    more: such probes fell near an arm's own knee, where trials are unclear and extended.)"""

    def __init__(self, objs: Sequence[s.Objective], limits: s.Limits,
                 on_trial: Callable[[str, s.Trial], None] | None = None):
        self.objs = list(objs)
        self.trials: dict[str, list[s.Trial]] = {arm: [] for arm in ARMS}
        self.answers: dict[str, s.Answer] = {}

        def kept(arm: str) -> Callable[[s.Trial], None]:
            def keep(t: s.Trial) -> None:
                self.trials[arm].append(t)
                if on_trial:
                    on_trial(arm, t)
            return keep

        self._walks: dict[str, Generator[float, s.TrialResult, s.Answer]] = {
            arm: s.steps(self.objs, limits, on_trial=kept(arm)) for arm in ARMS}
        self.pending: dict[str, float] = {}
        for arm in ARMS:
            try:
                self.pending[arm] = next(self._walks[arm])
            except StopIteration as done:  # a budget too small for one trial
                self.answers[arm] = done.value

    def now(self, arm: str) -> s.Answer:
        return self.answers.get(arm) or s.partial(self.trials[arm], self.objs, "")

    def send(self, arm: str, got: s.TrialResult) -> list[str]:
        """The arm's trial result; what happened, as progress lines."""
        said = []
        try:
            self.pending[arm] = self._walks[arm].send(got)
        except StopIteration as done:
            self.answers[arm] = done.value
            del self.pending[arm]
            said.append(f"{arm}: search ended ({done.value.status})")
        settled = judgement.capacity_settled(self.now("baseline"), self.now("candidate"))
        if settled and self.pending:
            for left in list(self.pending):
                self._close(left)
                self.answers[left] = s.partial(self.trials[left], self.objs, settled, status="decided")
            said.append(f"both searches end: {settled}")
        return said

    def _close(self, arm: str) -> None:
        # A walk closed between runs at one rate keeps that trial (its runs so far, unclear) in
        # self.trials: their requests were sent and journalled.
        self._walks[arm].close()
        del self.pending[arm]

    def answered(self, why: str) -> dict[str, s.Answer]:
        """Each arm that ran a trial: its answer, or (its search ended from outside) its interval so far."""
        for arm in list(self.pending):
            self._close(arm)
            if self.trials[arm]:
                self.answers[arm] = s.partial(self.trials[arm], self.objs, why)
        return {arm: self.answers[arm] for arm in ARMS if arm in self.answers}


def _target(design: Design, url: str, spread) -> Target:
    return Target(url=url, model=design.deployment.model, api=design.workload.api, spread=tuple(spread))


def _live(design: Design, job: Job, arm: str, launcher: Launcher) -> tr.LiveTrials:
    """An arm's trials: the same seed on both arms (trial k draws the same arrivals and order), its
    own prompt words (the same sizes), and the candidate's health checked during each trial."""
    plan = design.capacity
    last = [time.monotonic()]

    def should_abort() -> str | None:
        if arm != "candidate" or time.monotonic() - last[0] < design.guardrails.health_every_s:
            return None
        last[0] = time.monotonic()
        return launcher.check(arm)

    def send(planned, job_: Job):
        return run_load(run(job_.target, planned, job_.prompts, should_abort=should_abort))

    return tr.LiveTrials(job, list(plan.objectives), plan.slo, send, plan.warmup_requests, seed=0,
                         prompts_for=lambda reqs, draw: job.prompts_anew(reqs, f"{arm}-trial-{draw}"))


def _result(design: Design, answer: s.Answer, arm: str, started_at: datetime, launcher: Launcher) -> CapacityResult:
    plan = design.capacity
    return result_of(answer, list(plan.objectives), target=launcher.url(arm), model=design.deployment.model,
                     workload=design.workload.name, started_at=started_at, alpha=plan.alpha, width=plan.width,
                     trial_requests=plan.trial_requests, warmup_requests=plan.warmup_requests)
