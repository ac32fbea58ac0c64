"""Runs a Design against the real deployment: warmup, interleaved blocks on the same request set,
looks at the primary, guardrails, the journal, and the baseline restored and verified whatever
happens.

Warmup: after every (re)start of an arm (with sequential arms, every switch is a restart: a cold
engine's first requests are slow), the arm gets the design's warmup requests before its block, not
measured; the restart's duration and the warmup are kept per block.

Looks: after each pair of blocks at which the design's stopping rule has a look
(advisor/experiments/design/plan.py Stopping), the primary is judged from the valid blocks so far at
that look's nominal level; a decisive verdict (improved, regressed, no change) before the maximum
stops the experiment there. Every verdict, at a look and at the end, is the judgement's
(advisor/experiments/judgement/judge.py): the runner runs the blocks and records what happened.

Invalid blocks: a block whose load generator could not hold its plan (advisor/loadgen/metrics.py:
it fell behind its schedule) measured a different load than the other blocks, so it is not judged;
it stays in the result's blocks, marked, with the host's CPU and the generator's own measured while
it ran. When an arm keeps fewer than MIN_VALID_BLOCKS valid blocks, or fewer than half of the blocks
it ran, the judgement is "inconclusive" with the reason: the valid blocks left would be too few for a
rank test, or a selection (the blocks where the generator kept up) rather than a sample of the arm.
At every look the run stops as soon as that outcome is out of reach ("cannot be judged", with the
cause and the remedy: reach.py), instead of running to its maximum.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from advisor import interrupts
from advisor.errors import AdvisorError
from advisor.experiments.arms import engine_readouts
from advisor.experiments.judgement import judge as judgement
from advisor.experiments.run import pacing
from advisor.experiments.judgement import quality
from advisor.experiments.judgement import reach
from advisor.experiments.design.plan import Design
from advisor.experiments.arms.journal import Journal
from advisor.experiments.arms.protocol import Launcher, LaunchError
from advisor.experiments.arms.processes import Resident
from advisor.experiments.result import BlockRecord, ExperimentResult, Look
from advisor.loadgen.loop import run_load
from advisor.loadgen.metrics import summarize
from advisor.loadgen.record import RequestRecord
from advisor.loadgen.runner import Target, run
from advisor.verdict import interval_text, ratio_text
from advisor.workload.prompts import PromptSizer, PromptSizingError

if TYPE_CHECKING:
    from advisor.cost import Pricing

BLOCK_STRIDE = 1_000_000  # request indices per block: every block's prompts are its own
MIN_VALID_BLOCKS = reach.MIN_VALID_BLOCKS


class Aborted(Exception):
    pass


class NotStarted(AdvisorError):
    """The experiment could not start (the baseline did not come up, or prompts cannot be sized
    against it); the target was left as found."""


def _block_requests(design: Design, block: int):
    return [dataclasses.replace(r, index=block * BLOCK_STRIDE + r.index) for r in design.requests]


def warmup_requests(design: Design):
    base = design.requests
    return [dataclasses.replace(base[i % len(base)], index=999 * BLOCK_STRIDE + i, cancel_after_tokens=None)
            for i in range(max(0, design.warmup_requests))]


def warm_up(target: Target, reqs, prompts, concurrency: int) -> None:
    """The first requests after a start are slow (allocation, caches): send the block's own shape,
    at its own concurrency, and measure nothing."""
    if not reqs:
        return
    run_load(run(target, reqs, prompts, concurrency=max(1, min(concurrency, len(reqs)))))


class Prompts:
    def __init__(self, design: Design, sizer: PromptSizer):
        self.design, self.sized, self.requests = design, sizer, design.requests

    def sizer(self, reqs):
        return self.sized.prompts_for(reqs, self.design.workload)


def execute(design: Design, launcher: Launcher, journal: Journal, say: Callable[[str], None],
            save_block: Callable[..., int | None] | None = None, *,
            sizer_for: Callable[[str], PromptSizer] | None = None, pricing: Pricing | None = None,
            cost_note: str | None = None) -> ExperimentResult:
    """A trial of the schedule and the preflight (refused before anything starts), "begin" journalled with what was found serving,
    the baseline brought up and every prompt sized in its tokens, then the blocks; the target is
    left as found whatever happens. Raises LaunchError when refused, NotStarted when the baseline
    or the prompts fail (target left as found), KeyboardInterruptWithResult on an interrupt.
    `pricing`: both arms' price and units, for the judgement's cost (`cost_note`: why there is none)."""
    exp = design.id
    paced = pacing.check(_block_requests(design, 0), design.workload.api, design.deployment.model)
    if paced is not None and not paced.kept:
        raise LaunchError(paced.refusal())
    if paced is not None:
        say(f"the load generator keeps the schedule here: a trial of {paced.sends} sends at {paced.rate:.1f}/s "
            f"fired {paced.lag_p99_s * 1000:.0f} ms late at p99")
    sizer_for = begin(design, launcher, journal, say, sizer_for)
    not_started: str | None = None
    by_block: dict[tuple[str, int], list[RequestRecord]] = {}
    blocks: list[BlockRecord] = []
    outputs: dict[str, list] = {}
    aborted: str | None = None
    looks: list[Look] = []
    stop_reason: str | None = None
    out_of_reach: str | None = None  # "cannot be judged: ...", when the run stopped for it
    arms: dict[str, dict] = {}  # what each arm's engine said it is, read once
    started = time.monotonic()
    sent = 0
    interrupted = False
    try:
        try:
            # Prompts are sized in the baseline's own tokens, all before the candidate first starts.
            t0 = time.monotonic()
            prompts = Prompts(design, sizer_for(launcher.bring_up("baseline")))
            restart = {"baseline": time.monotonic() - t0} if launcher.starts else {}
            t0 = time.monotonic()
            warm_reqs = warmup_requests(design)
            warm_prompts = prompts.sizer(warm_reqs) if warm_reqs else []
            block_prompts = {b: prompts.sizer(_block_requests(design, b)) for b in range(design.blocks_per_arm)}
            say(f"{prompts.sized.summary()} in {time.monotonic() - t0:.1f} s")
        except (LaunchError, PromptSizingError) as e:
            not_started = str(e)
            raise Aborted(f"could not start: {e}") from None
        cold = {"baseline", "candidate"}  # warmed after every (re)start; the found baseline once
        for i, (arm, b) in enumerate(design.order):
            if time.monotonic() - started > design.guardrails.max_duration_s:
                raise Aborted(f"guardrail: the experiment ran past {design.guardrails.max_duration_s:.0f}s")
            if sent + len(design.requests) > design.guardrails.max_requests:
                raise Aborted(f"guardrail: the next block would pass {design.guardrails.max_requests} requests")
            say(f"{arm} block {b + 1} of at most {design.blocks_per_arm}")
            starts, t0 = launcher.starts, time.monotonic()
            url = launcher.bring_up(arm)
            if launcher.starts != starts:
                cold.add(arm)
                restart[arm] = time.monotonic() - t0
                say(f"{arm} started in {restart[arm]:.0f}s")
            urls = launcher.urls(arm)
            target = Target(url=url, model=design.deployment.model, api=design.workload.api, spread=tuple(urls[1:]))
            warmed_now = 0
            if arm in cold:
                a = design.workload.arrival
                if warm_reqs:
                    say(f"warming the {arm} up: {len(warm_reqs)} requests, not measured")
                warm_up(target, warm_reqs, warm_prompts, a.concurrency or 4)
                warmed_now = len(warm_reqs)
                if design.numerics and arm not in outputs:
                    outputs[arm] = quality.greedy(url, design.deployment.model)
                cold.discard(arm)
            reqs = _block_requests(design, b)
            last_check = [time.monotonic()]

            def should_abort(arm=arm) -> str | None:
                if time.monotonic() - last_check[0] < design.guardrails.health_every_s:
                    return None
                last_check[0] = time.monotonic()
                return launcher.check(arm) if arm == "candidate" else None

            a = design.workload.arrival
            watch = engine_readouts.ReplicasWatch(urls, design.deployment.engine, design.deployment.model,
                                                  design.watch, describe=arm not in arms)
            if watch.arm_info is not None:
                arms[arm] = watch.arm_info
            cpu = pacing.CpuMeter()
            try:
                r = run_load(run(target, reqs, block_prompts[b], should_abort=should_abort,
                                 concurrency=a.concurrency if a.kind == "concurrency" else None))
            except BaseException:
                watch.close()  # the block failed: its scrapes stop with it
                raise
            host_busy, own_cpu, waited = cpu.stop()
            block_sent = sum(x.status != "not_sent" for x in r.records)
            sent += block_sent
            server = watch.readout(block_sent)
            model = design.models.get(arm)
            memory = (launcher.resident_bytes(arm, (model.path,) if model else ())
                      if hasattr(launcher, "resident_bytes") else Resident())
            summary = summarize(r)
            by_block[(arm, b)] = r.records
            run_id = save_block(arm, b, r, summary) if save_block else None
            s = summary.overall
            blocks.append(BlockRecord(arm=arm, block=b, requests=s.requests, ok=s.ok, errors=s.errors,
                                      ttft_p50=s.ttft.p50, tpot_p50=s.tpot.p50, e2e_p95=s.e2e.p95,
                                      generator_valid=summary.generator.valid,
                                      why_invalid=summary.generator.why_invalid, run_id=run_id,
                                      restart_s=restart.pop(arm, None), warmup_requests=warmed_now,
                                      server=server, resident_bytes=memory.rss,
                                      weights_resident_bytes=memory.mapped, gpu_bytes=memory.gpu,
                                      host_cpu_busy=host_busy, generator_cpu=own_cpu,
                                      generator_waited=waited))
            journal.write(exp, "block", arm=arm, block=b, ok=s.ok, errors=s.errors)
            say(f"{arm} block {b + 1}: {s.ok}/{s.requests} ok, TTFT p50 {1000 * (s.ttft.p50 or 0):.0f} ms")
            if r.aborted:
                raise Aborted(f"guardrail: {r.aborted}")
            if s.requests and s.errors / s.requests > design.guardrails.max_error_rate:
                raise Aborted(f"guardrail: {s.errors}/{s.requests} requests failed on the {arm}")
            problem = launcher.check(arm)
            if problem:
                raise Aborted(f"guardrail: {problem}")
            if i % 2 == 1:  # a pair of blocks is complete
                look = judgement.look(design, by_block, blocks, b + 1, sent)
                if look is not None:
                    looks.append(look)
                    say(_look_line(look, len(looks)))
                    stop_reason = judgement.stop_at(look, len(looks), design.blocks_per_arm)
                    if stop_reason is not None:
                        break
                if b + 1 < design.blocks_per_arm:
                    futile = reach.out_of_reach(blocks, reach.reachable(
                        b + 1, design.blocks_per_arm, sent, len(design.requests), design.guardrails.max_requests,
                        time.monotonic() - started, design.guardrails.max_duration_s))
                    if futile and reach.shortfall(blocks):  # judged now otherwise: a later look may be too
                        out_of_reach = futile
                        stop_reason = f"stopped after {b + 1} blocks per arm: {futile}"
                        say(stop_reason)
                        break
    except Aborted as e:
        aborted = str(e)
    except LaunchError as e:
        aborted = f"launch failed: {e}"
    except KeyboardInterrupt:
        aborted, interrupted = "interrupted", True
    finally:
        restored, note, signalled = restore(launcher, journal, exp, say)
    if aborted:
        journal.write(exp, "aborted", reason=aborted)
    if not_started is not None and not signalled:
        raise NotStarted(not_started if restored else f"{not_started}; {note}")
    interrupted = interrupted or signalled  # a signal deferred by the restore's shield
    guard = quality.compare(outputs["baseline"], outputs["candidate"]) if len(outputs) == 2 else None
    judged = judgement.judge(design, by_block, blocks, looks=looks, aborted=aborted, stop_reason=stop_reason,
                             out_of_reach=out_of_reach, quality=guard, pricing=pricing, cost_note=cost_note)
    server_rows = engine_readouts.per_arm(blocks, design.watch)
    result = ExperimentResult(
        id=exp, deployment=design.deployment.name, mechanism=design.mechanism, value=repr(design.value),
        status="aborted" if aborted else "finished", judgement=judged, blocks=blocks, aborted=aborted,
        baseline_restored=restored, restore_note=note, fails_means=design.fails_means, server=server_rows, arms=arms,
        server_notes=[*launcher.notes, *engine_readouts.notes(blocks, server_rows, judged.verdict)],
        models=design.models, kubernetes=dict(getattr(launcher, "info", None) or {}))
    result._by_block = judgement.valid(by_block, blocks)
    if interrupted:
        raise KeyboardInterruptWithResult(result)
    return result


def begin(design: Design, launcher: Launcher, journal: Journal, say: Callable[[str], None],
          sizer_for: Callable[[str], PromptSizer] | None) -> Callable[[str], PromptSizer]:
    """The launcher's preflight (refused before anything starts), its notes said, "begin"
    journalled with what was found serving; returns how prompts are sized against an arm's URL."""
    launcher.preflight()
    for note in launcher.notes:  # what the plan became on this host (a fresh baseline and why, rooms)
        say(note)
    journal.write(design.id, "begin", deployment=design.deployment.name, mechanism=design.mechanism,
                  value=repr(design.value), **launcher.found_state(),
                  baseline_args=design.baseline_args, candidate_args=design.candidate_args)
    # Sampled: every prompt counted would be one POST /tokenize each on the baseline before the
    # first block (6,362 for the default experiment, 11 s on the CPU vLLM); see PromptSizer.
    return sizer_for or (lambda url: PromptSizer.for_target(url, design.deployment.model,
                                                            tokenizer=design.workload.tokenizer, verify="sample"))


def _look_line(look: Look, n: int) -> str:
    why = f" ({look.reason})" if look.reason else ""
    return (f"look {n} after {look.blocks} blocks per arm: ratio {ratio_text(look.ratio)}, "
            f"{100 * (1 - look.alpha):.3g}% CI {interval_text(look.ci)}: {look.verdict}{why}")


class KeyboardInterruptWithResult(KeyboardInterrupt):
    def __init__(self, result: ExperimentResult):
        super().__init__("interrupted")
        self.result = result


def restore(launcher: Launcher, journal: Journal, exp: str, say) -> tuple[bool, str, bool]:
    """Leave the target as found, shielded: a SIGINT or SIGTERM that arrives meanwhile is deferred
    until the restore is done. Returns (restored, note, whether a signal arrived)."""
    restored, note, signalled = False, "restore interrupted; the next start will retry it", False
    try:
        with interrupts.shielded():
            say("restoring the baseline")
            try:
                note = launcher.restore() or "baseline serving with its own flags, verified healthy"
                restored = True
            except Exception as e:  # noqa: BLE001 - the journal keeps it pending for recovery
                journal.write(exp, "restore failed", error=str(e))
                note = f"restore failed ({e}); the next start will retry it"
            else:
                journal.write(exp, "restored", note=note)
    except KeyboardInterrupt:
        signalled = True
    return restored, note, signalled
