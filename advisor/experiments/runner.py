"""Runs a Design against the real deployment: warmup, interleaved blocks on the same request set,
looks at the primary, guardrails, the journal, and the baseline restored and verified whatever
happens.

Warmup: after every (re)start of an arm (with sequential arms, every switch is a restart: a cold
engine's first requests are slow), the arm gets the design's warmup requests before its block, not
measured; the restart's duration and the warmup are kept per block.

Looks: after each pair of blocks at which the design's stopping rule has a look
(advisor/experiments/design.py Stopping), the primary is judged from the valid blocks so far at
that look's nominal level; a decisive verdict (improved, regressed, no change) before the maximum
stops the experiment there. The final verdict is the last look's, with the secondaries judged at
that same level behind it (stats.judge).

Invalid blocks: a block whose load generator could not hold its plan (advisor/loadgen/metrics.py:
it fell behind its schedule) measured a different load than the other blocks, so it is not judged;
it stays in the result's blocks, marked. When an arm keeps fewer than MIN_VALID_BLOCKS valid blocks,
or fewer than half of the blocks it ran, the verdict is "inconclusive" with the reason: the valid
blocks left would be too few for a rank test, or a selection (the blocks where the generator kept
up) rather than a sample of the arm.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
import zlib
from collections.abc import Callable

from advisor import interrupts
from advisor.errors import AdvisorError
from advisor.experiments import engine_readouts, model_swap, quality, readouts, stats
from advisor.experiments.design import Design
from advisor.experiments.journal import Journal
from advisor.experiments.launchers import Launcher, LaunchError
from advisor.experiments.processes import Resident
from advisor.experiments.result import BlockRecord, BucketResult, ExperimentResult, Look, MemoryReadout
from advisor.loadgen.loop import run_load
from advisor.loadgen.metrics import summarize
from advisor.loadgen.record import RequestRecord
from advisor.loadgen.runner import Target, run
from advisor.workload.prompts import PromptSizer, PromptSizingError

BLOCK_STRIDE = 1_000_000  # request indices per block: every block's prompts are its own
MIN_VALID_BLOCKS = stats.MIN_BLOCKS  # per arm, with a valid load generator, to judge at all


class Aborted(Exception):
    pass


class NotStarted(AdvisorError):
    """The experiment could not start (the baseline did not come up, or prompts cannot be sized
    against it); the target was left as found."""


def _block_requests(design: Design, block: int):
    return [dataclasses.replace(r, index=block * BLOCK_STRIDE + r.index) for r in design.requests]


def _warmup_requests(design: Design):
    base = design.requests
    return [dataclasses.replace(base[i % len(base)], index=999 * BLOCK_STRIDE + i, cancel_after_tokens=None)
            for i in range(max(0, design.warmup_requests))]


def _warmup(target: Target, reqs, prompts, concurrency: int) -> None:
    """The first requests after a start are slow (allocation, caches): send the block's own shape,
    at its own concurrency, and measure nothing."""
    if not reqs:
        return
    run_load(run(target, reqs, prompts, concurrency=max(1, min(concurrency, len(reqs)))))


class Prompts:
    def __init__(self, design: Design, sizer):
        self.design, self._sizer, self.requests = design, sizer, design.requests

    def sizer(self, reqs):
        return self._sizer.prompts_for(reqs, self.design.workload)


def judge(design: Design, by_block: dict[tuple[str, int], list[RequestRecord]], slo=None,
          alpha: float = 0.05, primary_only: bool = False) -> list[stats.MetricResult]:
    """The primary readout at alpha and the secondaries behind it (Holm), each from the blocks given
    (the valid ones): per-request samples per block, or one value per block for a block readout."""
    def blocks(arm: str, metric: str, statistic: str) -> list[list[float | None]]:
        return [readouts.block_samples(recs, metric, statistic, slo)
                for (a, _), recs in sorted(by_block.items()) if a == arm]

    def one(metric: str, statistic: str) -> stats.MetricResult:
        return stats.compare(f"{metric}", blocks("baseline", metric, statistic),
                             blocks("candidate", metric, statistic), statistic=statistic,
                             lower_is_better=readouts.lower_is_better(metric), alpha=alpha,
                             seed=zlib.crc32(f"{metric}{statistic}".encode()) & 0xFFFF)

    primary = one(*design.primary)
    if primary_only:
        return [primary]
    secondary = [one(m, s) for m, s in design.secondary if (m, s) != tuple(design.primary)]
    return stats.judge(primary, secondary, alpha=alpha)


BUCKET_READOUTS = (("ttft", "p50"), ("tpot", "p50"))


def per_bucket(by_block: dict[tuple[str, int], list[RequestRecord]], alpha: float) -> list[BucketResult]:
    """TTFT and TPOT medians per workload bucket (a workload of one bucket has none to tell apart)."""
    names = list(dict.fromkeys(r.bucket for recs in by_block.values() for r in recs))
    if len(names) < 2:
        return []
    out = []
    for name in names:
        mine = {k: [r for r in recs if r.bucket == name] for k, recs in by_block.items()}
        counts = tuple(sum(len(v) for (a, _), v in mine.items() if a == arm) for arm in ("baseline", "candidate"))
        metrics = []
        for metric, statistic in BUCKET_READOUTS:
            def blocks(arm: str) -> list[list[float | None]]:
                return [readouts.block_samples(recs, metric, statistic) for (a, _), recs in sorted(mine.items())
                        if a == arm]
            metrics.append(stats.compare(metric, blocks("baseline"), blocks("candidate"), statistic=statistic,
                                         lower_is_better=True, alpha=alpha,
                                         seed=zlib.crc32(f"{name}{metric}".encode()) & 0xFFFF))
        out.append(BucketResult(bucket=name, requests=counts, metrics=metrics))
    return out


def _valid(by_block: dict[tuple[str, int], list[RequestRecord]], blocks: list[BlockRecord]):
    """The records of the blocks whose load generator held its plan: the only ones judged."""
    valid = {(b.arm, b.block) for b in blocks if b.generator_valid}
    return {k: v for k, v in by_block.items() if k in valid}


def too_few_valid(blocks: list[BlockRecord]) -> str | None:
    """Why the blocks cannot be judged (see the module docstring), or None."""
    problems = []
    for arm in ("baseline", "candidate"):
        ran = [b for b in blocks if b.arm == arm]
        bad = [b for b in ran if not b.generator_valid]
        need = max(MIN_VALID_BLOCKS, -(-len(ran) // 2))
        if ran and len(ran) - len(bad) < need:
            why = "; ".join(sorted({b.why_invalid for b in bad if b.why_invalid})) or "the generator fell behind"
            problems.append(f"{len(bad)} of {len(ran)} {arm} blocks had an invalid load generator ({why}); "
                            f"at least {need} valid blocks per arm are needed")
    return "; ".join(problems) or None


def execute(design: Design, launcher: Launcher, journal: Journal, say: Callable[[str], None],
            save_block: Callable[..., int | None] | None = None, *,
            sizer_for: Callable[[str], PromptSizer] | None = None) -> ExperimentResult:
    """Preflight (refused before anything starts), "begin" journalled with what was found serving,
    the baseline brought up and every prompt sized in its tokens, then the blocks; the target is
    left as found whatever happens. Raises LaunchError when refused, NotStarted when the baseline
    or the prompts fail (target left as found), KeyboardInterruptWithResult on an interrupt."""
    exp = design.id
    launcher.preflight()
    journal.write(exp, "begin", deployment=design.deployment.name, mechanism=design.mechanism,
                  value=repr(design.value), **launcher.found_state(),
                  baseline_args=design.baseline_args, candidate_args=design.candidate_args)
    sizer_for = sizer_for or (lambda url: PromptSizer.for_target(url, design.deployment.model,
                                                                 tokenizer=design.workload.tokenizer))
    not_started: str | None = None
    by_block: dict[tuple[str, int], list[RequestRecord]] = {}
    blocks: list[BlockRecord] = []
    outputs: dict[str, list] = {}
    aborted: str | None = None
    looks: list[Look] = []
    stop_reason: str | None = None
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
            warm_reqs = _warmup_requests(design)
            warm_prompts = prompts.sizer(warm_reqs) if warm_reqs else []
            block_prompts = {b: prompts.sizer(_block_requests(design, b)) for b in range(design.blocks_per_arm)}
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
                _warmup(target, warm_reqs, warm_prompts, a.concurrency or 4)
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
            try:
                r = run_load(run(target, reqs, block_prompts[b], should_abort=should_abort,
                                 concurrency=a.concurrency if a.kind == "concurrency" else None))
            except BaseException:
                watch.close()  # the block failed: its scrapes stop with it
                raise
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
                                      weights_resident_bytes=memory.mapped, gpu_bytes=memory.gpu))
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
                look = _look(design, by_block, blocks, b + 1, sent)
                if look is not None:
                    looks.append(look)
                    say(_look_line(look, len(looks)))
                    if look.verdict != "inconclusive" and b + 1 < design.blocks_per_arm:
                        stop_reason = (f"decisive at look {len(looks)} ({look.blocks} of at most "
                                       f"{design.blocks_per_arm} blocks per arm): {look.verdict}")
                        break
    except Aborted as e:
        aborted = str(e)
    except LaunchError as e:
        aborted = f"launch failed: {e}"
    except KeyboardInterrupt:
        aborted, interrupted = "interrupted", True
    finally:
        restored, note, signalled = _restore(launcher, journal, exp, say)
    if aborted:
        journal.write(exp, "aborted", reason=aborted)
    if not_started is not None and not signalled:
        raise NotStarted(not_started if restored else f"{not_started}; {note}")
    interrupted = interrupted or signalled  # a signal deferred by the restore's shield
    judged = _valid(by_block, blocks)
    level = looks[-1].alpha if looks else design.stopping.alpha
    metrics = judge(design, judged, alpha=level) if by_block else []
    primary = metrics[0] if metrics else None
    invalid = too_few_valid(blocks) if not aborted else None
    verdict = primary.verdict if primary and not aborted and not invalid else "inconclusive"
    reason = (f"aborted: {aborted}" if aborted else invalid or (primary.reason if primary else None))
    if stop_reason is None:
        stop_reason = (f"aborted: {aborted}" if aborted else
                       f"reached the planned maximum of {design.blocks_per_arm} blocks per arm"
                       + (f" after {len(looks)} look{'s' if len(looks) != 1 else ''}" if design.stopping.sequential
                          else " (fixed horizon)"))
    guard = quality.compare(outputs["baseline"], outputs["candidate"]) if len(outputs) == 2 else None
    if not aborted and not invalid:
        verdict, reason = quality.overrule(verdict, reason, guard)
    memory = _memory(blocks)
    tpot = next((m for m in metrics if m.metric == "tpot"), None)
    explanation = model_swap.explain(memory, tpot, design.fails_means) if design.models else None
    server_rows = engine_readouts.per_arm(blocks, design.watch)
    result = ExperimentResult(
        id=exp, deployment=design.deployment.name, mechanism=design.mechanism, value=repr(design.value),
        status="aborted" if aborted else "finished", verdict=verdict,
        primary_metric=f"{design.primary[0]} {design.primary[1]}",
        ratio=primary.ratio if primary else None, ci=primary.ci if primary else None, reason=reason,
        metrics=metrics, looks=looks, stop_reason=stop_reason,
        blocks=blocks, aborted=aborted, baseline_restored=restored, restore_note=note,
        fails_means=design.fails_means, server=server_rows, arms=arms,
        buckets=per_bucket(judged, level) if judged else [],
        server_notes=[*launcher.notes, *engine_readouts.notes(blocks, server_rows, verdict)],
        quality=guard, models=design.models, memory=memory, explanation=explanation)
    result._by_block = judged
    if interrupted:
        raise KeyboardInterruptWithResult(result)
    return result


def _memory(blocks: list[BlockRecord]) -> MemoryReadout | None:
    """Each arm's resident memory (and its mapped model file's), the median over its valid blocks;
    None when no block has one."""
    def med(arm: str, attr: str) -> int | None:
        v = [getattr(b, attr) for b in blocks if b.arm == arm and b.generator_valid and getattr(b, attr) is not None]
        return int(statistics.median(v)) if v else None

    m = MemoryReadout(baseline_bytes=med("baseline", "resident_bytes"), candidate_bytes=med("candidate", "resident_bytes"),
                      baseline_weights_bytes=med("baseline", "weights_resident_bytes"),
                      candidate_weights_bytes=med("candidate", "weights_resident_bytes"),
                      baseline_gpu_bytes=med("baseline", "gpu_bytes"), candidate_gpu_bytes=med("candidate", "gpu_bytes"))
    return None if m.baseline_bytes is None and m.candidate_bytes is None else m


def _look(design: Design, by_block, blocks: list[BlockRecord], k: int, sent: int) -> Look | None:
    """The primary judged from the valid blocks after k blocks per arm, at the look's level; None
    where the stopping rule has no look."""
    level = design.stopping.level_at(k, design.blocks_per_arm)
    if level is None:
        return None
    if too_few_valid(blocks):
        return Look(blocks=k, alpha=level, verdict="inconclusive", ratio=None, ci=None, requests=sent)
    [p] = judge(design, _valid(by_block, blocks), alpha=level, primary_only=True)
    return Look(blocks=k, alpha=level, verdict=p.verdict, ratio=p.ratio, ci=p.ci, requests=sent)


def _look_line(look: Look, n: int) -> str:
    ci = f"[{look.ci[0]:.3f}, {look.ci[1]:.3f}]" if look.ci else "-"
    ratio = "-" if look.ratio is None else f"{look.ratio:.3f}"
    return (f"look {n} after {look.blocks} blocks per arm: ratio {ratio}, {100 * (1 - look.alpha):.3g}% CI {ci}: "
            f"{look.verdict}")


class KeyboardInterruptWithResult(KeyboardInterrupt):
    def __init__(self, result: ExperimentResult):
        super().__init__("interrupted")
        self.result = result


def _restore(launcher: Launcher, journal: Journal, exp: str, say) -> tuple[bool, str, bool]:
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
