"""Runs a capacity experiment (`--readout capacity`) against the real deployment: each arm searched
for its capacity at the SLO (advisor/capacity/search.py), the two searches' trials in turn, the
baseline restored and verified whatever happens.

Alike arms: both searches start at the same rate (half a closed-loop burst's throughput on the
baseline), and trial k of either arm draws the same arrival times and the same request order
(LiveTrials with one seed), in its own prompt words of the same sizes: with the arms' trials
alternating (A, B, A, B ...; an arm whose search has ended leaves the other to go on alone), a
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
from collections.abc import Callable, Generator
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
    trials: dict[str, list[s.Trial]] = {arm: [] for arm in ARMS}
    answers: dict[str, s.Answer] = {}
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
        try:
            throughput, n = tr.burst_throughput(job)
        except tr.CapacityInputError as e:
            raise runner.Aborted(str(e)) from None
        start = min(max(throughput / 2, plan.min_rate), plan.max_rate)
        say(f"a burst of {n} requests on the baseline, {tr.PROBE_CONCURRENCY} at a time, completed "
            f"{throughput:.3g}/s: both searches start at {start:.3g} requests/s")
        limits = plan.limits(start, guard.max_requests // 2, guard.max_duration_s / 2)
        walks: dict[str, Generator[float, s.TrialResult, s.Answer]] = {
            arm: s.steps(objs, limits, on_trial=lambda t, arm=arm: _shown(trials[arm], t, arm, objs, say))
            for arm in ARMS}
        lives = {arm: _live(design, job, arm, launcher) for arm in ARMS}
        pending = {arm: next(walks[arm]) for arm in ARMS}
        warm = runner.warmup_requests(design)
        warm_prompts = sizer.prompts_for(warm, design.workload, salt="warmup") if warm else {}
        cold = set(ARMS)
        while pending:
            for arm in ARMS:
                if arm not in pending:
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
                got = live(pending[arm])
                journal.write(exp, "trial", arm=arm, rate=pending[arm], requests=got.requests)
                problem = launcher.check(arm)
                if problem:
                    raise runner.Aborted(f"guardrail: {problem}")
                try:
                    pending[arm] = walks[arm].send(got)
                except StopIteration as done:
                    answers[arm] = done.value
                    del pending[arm]
                    say(f"{arm}: search ended ({done.value.status})")
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
    results = {arm: _result(design, answers.get(arm) or s.partial(trials[arm], objs, aborted or "not finished"),
                            arm, started_at, launcher) for arm in ARMS if trials[arm] or arm in answers}
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


def _shown(kept: list[s.Trial], t: s.Trial, arm: str, objs, say: Callable[[str], None]) -> None:
    kept.append(t)
    say(f"{arm:9} {tr.trial_line(t, objs)}")


def _result(design: Design, answer: s.Answer, arm: str, started_at: datetime, launcher: Launcher) -> CapacityResult:
    plan = design.capacity
    return result_of(answer, list(plan.objectives), target=launcher.url(arm), model=design.deployment.model,
                     workload=design.workload.name, started_at=started_at, alpha=plan.alpha, width=plan.width,
                     trial_requests=plan.trial_requests, warmup_requests=plan.warmup_requests)
