"""The judgement of an experiment, and the only place a verdict is decided: from the blocks (their
readouts estimated by advisor/experiments/stats.py), the quality guard's reading, each arm's memory
and the price, one typed Judgement that the result stores and every view shows.

Verdict rule (r = ratio estimate, [lo, hi] its CI at the test's level, m the equivalence margin;
stated for lower-is-better readouts, mirrored for higher-is-better ones):

* improved: hi < 1 (the CI excludes 1 on the good side) AND r < 1 - m (the estimate is beyond the
  margin);
* regressed: lo > 1 AND r > 1 + m;
* no change: 1 - m <= lo and hi <= 1 + m (the whole CI lies inside the margin);
* inconclusive: everything else, including a CI that excludes 1 with an estimate inside the margin
  (a real but small difference the run was too short to place), and always when data are missing
  (the estimate's problem: too few blocks or samples, an empty block, a NaN, a statistic of zero)
  or the blocks cannot reach the level (a rank test on few blocks). Missing data never gives "no
  change" or "improved".

Multiplicity (``family``): serial gatekeeping. The primary readout, chosen by the symptom, is
tested at alpha alone; the secondaries are tested only behind a decisive primary ("improved",
"regressed" or "no change"), as one Holm family at alpha. Each secondary gets its Holm adjusted p,
and its CI at the level its rank earns (alpha / (m - rank + 1)), from the same estimate; it can be
"improved" or "regressed" only when its adjusted p is <= alpha and that CI says so. Behind an
inconclusive primary every secondary is "inconclusive" (its estimate and interval still shown).
The family-wise error over the primary and its secondaries is then at most alpha: where the
primary's null holds, any false call needs the primary's own error; where it does not, the
secondaries alone are a Holm family at alpha (tests/unit/test_stats.py, benchmarks/stats_calibration.py).

Looks (``look``, ``sequential``): after each pair of blocks the primary is judged from a repeated
confidence interval (Jennison & Turnbull) at the look's nominal level from the design's
group-sequential boundary (stats.boundary_alphas), so a verdict read off any look, at whichever
look it stops, holds the overall error rate (measured A/A: 4.0 % over 500 runs, p50, cap 12
blocks, O'Brien-Fleming). A decisive look before the maximum stops the run (``stop_at``). The
final judgement is at the last look's level, the secondaries behind the primary at that level too.

Blocks whose load generator fell behind are not judged (``valid``); an arm left with too few valid
blocks, or fewer than half of those it ran, is "inconclusive" with the cause (advisor/experiments/judgement/reach.py).

Overrules: the quality guard (advisor/experiments/judgement/quality.py) measures; here it rules. Past its
margin, the candidate regressed whatever its speed; with its quality unclear, a faster candidate is
not yet an improvement. The memory readouts do not change a verdict: where a model-file swap's
memory fell and its TPOT did not improve, they explain the failure (model_swap.explain).

Capacity (``judge_capacity``): a capacity experiment searches each arm for the highest rate at which
the SLOs hold (advisor/capacity/search.py); its one readout, capacity per_s, is judged by the same
rule from the two arms' intervals. Both searches stop early (``capacity_settled``) once each arm is
bracketed and the ratio's interval lies past the margin: narrower arm intervals can only narrow it.

Cost: both arms' cost per output token from the output tokens and the goodput per second estimated
here once, at the last look's level (advisor/cost.py computes from those, and compares nothing).
"""

from __future__ import annotations

import math
import statistics
import zlib
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel, Field

from advisor.capacity.result import CapacityResult
from advisor.cost import ExperimentCost, Pricing, experiment_cost
from advisor.experiments.arms import model_swap
from advisor.experiments.judgement import reach
from advisor.experiments.design import readouts
from advisor.experiments import stats
from advisor.experiments.result import (
    BlockRecord,
    BucketResult,
    Judgement,
    Look,
    MemoryReadout,
    MetricResult,
    Overrule,
    QualityGuard,
    Statistic,
)
from advisor.readout_vocabulary import lower_is_better
from advisor.verdict import Verdict

if TYPE_CHECKING:
    from advisor.experiments.design.plan import Design
    from advisor.loadgen.record import RequestRecord

    ByBlock = dict[tuple[str, int], list[RequestRecord]]

MARGIN = 0.05  # the equivalence margin, DESIGN.md section 6
# Readouts the cost is computed from: each arm's rate per block, higher is better.
COST_READOUTS = (("output_tokens", "per_s"), ("goodput", "per_s"))
BUCKET_READOUTS = (("ttft", "p50"), ("tpot", "p50"))


# --------------------------------------------------------------------------------------------
# one readout


def classify(ratio: float, ci: tuple[float, float], level: float, margin: float,
             lower_is_better: bool) -> tuple[Verdict, str]:
    """The verdict rule of the module docstring, with the sentence that says why."""
    lo, hi = ci
    m = f"{100 * margin:.4g}%"
    band = f"[{1 - margin:.2f}, {1 + margin:.2f}]"
    sense = "lower is better" if lower_is_better else "higher is better"
    head = f"{stats.pct(level)} CI of the ratio [{lo:.3g}, {hi:.3g}]"
    below = hi < 1 and ratio < 1 - margin
    above = lo > 1 and ratio > 1 + margin
    if below or above:
        good = below if lower_is_better else above
        side = "below" if below else "above"
        return ("improved" if good else "regressed",
                f"{head} lies {side} 1 and the estimate {ratio:.3g} is beyond the {m} margin ({sense})")
    if 1 - margin <= lo and hi <= 1 + margin:
        return "no change", f"{head} lies inside the ±{m} equivalence margin {band}"
    if hi < 1 or lo > 1:
        return ("inconclusive",
                f"{head} excludes 1 but the estimate {ratio:.3g} is within the {m} margin and the CI "
                f"is not inside {band}: a difference too small to call; more blocks would narrow it")
    return ("inconclusive",
            f"{head} includes 1 and reaches beyond the ±{m} margin {band}; more blocks would narrow it")


def judged(metric: str, est: stats.Estimate, lower_is_better: bool, margin: float = MARGIN,
           alpha: float = 0.05) -> MetricResult:
    """One readout's estimate judged at level 1 - alpha."""
    ci = None if est.problem else est.interval(alpha)
    if est.problem:
        verdict, reason = "inconclusive", est.problem
    elif ci is None:
        verdict, reason = "inconclusive", stats.unreachable(est.statistic, alpha, est.n_blocks)
    else:
        verdict, reason = classify(est.ratio, ci, 1 - alpha, margin, lower_is_better)  # type: ignore[arg-type]
    out = MetricResult(metric=metric, statistic=est.statistic, lower_is_better=lower_is_better,
                       baseline_value=est.baseline_value, candidate_value=est.candidate_value, ratio=est.ratio,
                       ci=ci, level=1 - alpha, p_value=est.p_value, adjusted_p=est.p_value, verdict=verdict,
                       method=est.method, n_blocks=est.n_blocks, n_samples=est.n_samples, margin=margin,
                       reason=reason)
    out._estimate = est
    return out


def compare(
    metric: str,
    baseline_blocks: Sequence[Sequence[float | None]],
    candidate_blocks: Sequence[Sequence[float | None]],
    statistic: Statistic = "p50",
    lower_is_better: bool = True,
    margin: float = MARGIN,
    alpha: float = 0.05,
    seed: int = 0,
    n_boot: int = 2000,
) -> MetricResult:
    """One readout compared between the arms and judged at level 1 - alpha."""
    if not 0 < margin < 1:
        raise ValueError(f"margin must lie in (0, 1), got {margin}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    est = stats.estimate(baseline_blocks, candidate_blocks, statistic, seed=seed, n_boot=n_boot)
    return judged(metric, est, lower_is_better, margin, alpha)


# --------------------------------------------------------------------------------------------
# the primary at alpha, Holm across the secondaries


def family(primary: MetricResult, secondaries: list[MetricResult], alpha: float = 0.05) -> list[MetricResult]:
    """[primary, *secondaries]: the secondaries gatekept behind the primary, Holm among themselves.

    The primary keeps its own test (adjusted_p = p_value). Secondaries are ranked by raw p (a
    missing p ranks last) and each judged at the level of its rank, from its own estimate."""
    first = _copy(primary, adjusted_p=primary.p_value)
    m = len(secondaries)
    out = []
    for res, rank in zip(secondaries, stats.holm([s.p_value for s in secondaries], alpha)):
        out.append(_copy(res, adjusted_p=None) if rank.adjusted_p is None else _at_rank(res, rank, alpha, m))
    if primary.verdict == "inconclusive":
        out = [_gated(r) for r in out]
    return [first, *out]


def _copy(res: MetricResult, **update) -> MetricResult:
    out = res.model_copy(update=update)
    out._estimate = res._estimate
    return out


def _gated(res: MetricResult) -> MetricResult:
    if res.verdict == "inconclusive":
        return res
    return _copy(res, verdict="inconclusive",
                 reason=f"not tested: secondaries are tested only behind a decisive primary (it would read "
                        f"{res.verdict}: {res.reason})")


def _at_rank(res: MetricResult, rank: stats.HolmRank, alpha: float, m: int) -> MetricResult:
    adj, level_alpha = rank.adjusted_p, rank.alpha
    note = f" (Holm, {m} secondary metrics: adjusted p {adj:.3g})"
    if res.verdict == "inconclusive" and res.ratio is None:  # nothing estimated: its reason stands
        return _copy(res, adjusted_p=adj, level=1 - level_alpha)
    est = res._estimate
    if est is None:
        # A result read back from the store: its data are not at hand, and a CI at this level
        # cannot be made up, so it cannot be called.
        return _copy(res, adjusted_p=adj, level=1 - level_alpha, ci=None, verdict="inconclusive",
                     reason="its data are not at hand to recompute the CI at the Holm level" + note)
    at = judged(res.metric, est, res.lower_is_better, res.margin, level_alpha)
    verdict, reason = at.verdict, at.reason
    if verdict in ("improved", "regressed") and adj > alpha:
        verdict = "inconclusive"
        reason = f"{reason}, but Holm's step-down stops before it (adjusted p {adj:.3g} > {alpha:g})"
    return _copy(at, adjusted_p=adj, verdict=verdict, reason=reason + note)


# --------------------------------------------------------------------------------------------
# the readouts of an experiment's blocks


def _seed(text: str) -> int:
    return zlib.crc32(text.encode()) & 0xFFFF


def _arm_blocks(by_block: ByBlock, arm: str, metric: str, statistic: str, slo=None) -> list[list[float | None]]:
    """Per-request samples per block, or one value per block for a block readout, in block order."""
    return [readouts.block_samples(recs, metric, statistic, slo) for (a, _), recs in sorted(by_block.items())
            if a == arm]


def _estimate(by_block: ByBlock, metric: str, statistic: str, slo=None) -> stats.Estimate:
    return stats.estimate(_arm_blocks(by_block, "baseline", metric, statistic, slo),
                          _arm_blocks(by_block, "candidate", metric, statistic, slo), statistic,  # type: ignore[arg-type]
                          seed=_seed(f"{metric}{statistic}"))


def _design_readouts(design: Design, primary_only: bool) -> list[tuple[str, str]]:
    primary = tuple(design.primary)
    if primary_only:
        return [primary]
    return [primary, *(tuple(s) for s in design.secondary if tuple(s) != primary)]


def _estimates(design: Design, by_block: ByBlock, slo=None, primary_only: bool = False
               ) -> dict[tuple[str, str], stats.Estimate]:
    return {(m, s): _estimate(by_block, m, s, slo) for m, s in _design_readouts(design, primary_only)}


def _family_of(estimates: dict[tuple[str, str], stats.Estimate], alpha: float) -> list[MetricResult]:
    results = [judged(m, est, lower_is_better(m), MARGIN, alpha) for (m, _), est in estimates.items()]
    if not results:
        return []
    return family(results[0], results[1:], alpha)


def judge_readouts(design: Design, by_block: ByBlock, slo=None, alpha: float = 0.05,
                   primary_only: bool = False) -> list[MetricResult]:
    """The primary readout at alpha and the secondaries behind it (Holm), from the blocks given."""
    return _family_of(_estimates(design, by_block, slo, primary_only), alpha)


def per_bucket(by_block: ByBlock, alpha: float) -> list[BucketResult]:
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
            est = stats.estimate(_arm_blocks(mine, "baseline", metric, statistic),
                                 _arm_blocks(mine, "candidate", metric, statistic), statistic,  # type: ignore[arg-type]
                                 seed=_seed(f"{name}{metric}"))
            metrics.append(judged(metric, est, True, MARGIN, alpha))
        out.append(BucketResult(bucket=name, requests=counts, metrics=metrics))
    return out


def valid(by_block: ByBlock, blocks: list[BlockRecord]) -> ByBlock:
    """The records of the blocks whose load generator held its plan: the only ones judged."""
    kept = {(b.arm, b.block) for b in blocks if b.generator_valid}
    return {k: v for k, v in by_block.items() if k in kept}


def too_few_valid(blocks: list[BlockRecord]) -> str | None:
    """Why the blocks cannot be judged (see the module docstring), or None."""
    short = reach.shortfall(blocks)
    return None if short is None else f"too few valid blocks to judge: {short}"


# --------------------------------------------------------------------------------------------
# looks


def look(design: Design, by_block: ByBlock, blocks: list[BlockRecord], k: int, sent: int) -> Look | None:
    """The primary judged from the valid blocks after k blocks per arm, at the look's level; None
    where the stopping rule has no look."""
    level = design.stopping.level_at(k, design.blocks_per_arm)
    if level is None:
        return None
    short = reach.shortfall(blocks)
    if short:
        return Look(blocks=k, alpha=level, verdict="inconclusive", ratio=None, ci=None, requests=sent, reason=short)
    [p] = judge_readouts(design, valid(by_block, blocks), alpha=level, primary_only=True)
    return Look(blocks=k, alpha=level, verdict=p.verdict, ratio=p.ratio, ci=p.ci, requests=sent,
                reason=p.reason if p.ratio is None or p.ci is None else None)


def stop_at(look: Look, n: int, max_blocks: int) -> str | None:
    """Why the run stops at this look (its n-th): decisive before the maximum; else None."""
    if look.verdict == "inconclusive" or look.blocks >= max_blocks:
        return None
    return f"decisive at look {n} ({look.blocks} of at most {max_blocks} blocks per arm): {look.verdict}"


class SequentialResult(BaseModel):
    metric: str
    statistic: Statistic
    boundary: stats.Boundary
    alpha: float
    min_blocks: int
    max_blocks: int
    blocks_used: int = Field(description="blocks per arm consumed from the stream")
    n_samples: tuple[int, int] = Field(description="samples used (baseline, candidate)")
    decisive: bool
    stopped_early: bool
    looks: list[Look]
    result: MetricResult


def sequential(
    metric: str,
    block_pairs: Iterable[tuple[Sequence[float | None], Sequence[float | None]]],
    *,
    statistic: Statistic = "p50",
    lower_is_better: bool = True,
    margin: float = MARGIN,
    alpha: float = 0.05,
    max_blocks: int = 12,
    min_blocks: int | None = None,
    boundary: stats.Boundary = "obrien-fleming",
    seed: int = 0,
    n_boot: int = 2000,
) -> SequentialResult:
    """Consume (baseline_block, candidate_block) pairs until the verdict is decisive.

    After each pair, from `min_blocks` per arm on (default: the fewest an estimate can use at
    alpha), the readout is judged at the look's nominal level from `stats.boundary_alphas`; the run
    stops at the first "improved", "regressed" or "no change", or after `max_blocks` pairs. The
    stream is read lazily, so a generator that runs the blocks on demand runs only those needed.
    """
    if min_blocks is None:
        min_blocks = max(stats.min_blocks_per_arm(statistic, alpha), stats.MIN_BLOCKS)
    min_blocks = max(min_blocks, stats.MIN_BLOCKS)
    levels = stats.boundary_alphas(min_blocks, max_blocks, alpha, boundary)
    base: list[Sequence[float | None]] = []
    cand: list[Sequence[float | None]] = []
    looks: list[Look] = []
    result: MetricResult | None = None
    for pair in block_pairs:
        base.append(pair[0])
        cand.append(pair[1])
        k = len(base)
        if k < min_blocks:
            continue
        a = levels[k - min_blocks]
        result = compare(metric, base, cand, statistic=statistic, lower_is_better=lower_is_better,
                         margin=margin, alpha=a, seed=seed + k, n_boot=n_boot)
        looks.append(Look(blocks=k, alpha=a, verdict=result.verdict, ratio=result.ratio, ci=result.ci))
        if result.verdict != "inconclusive" or k >= max_blocks:
            break
    if result is None:  # the stream ended before the first look
        result = compare(metric, base, cand, statistic=statistic, lower_is_better=lower_is_better,
                         margin=margin, alpha=levels[0], seed=seed, n_boot=n_boot)
        result = _copy(result, verdict="inconclusive",
                       reason=f"the stream ended after {len(base)} block pair(s), before the first look at "
                              f"{min_blocks}")
    k = len(base)
    decisive = result.verdict != "inconclusive"
    return SequentialResult(
        metric=metric, statistic=statistic, boundary=boundary, alpha=alpha, min_blocks=min_blocks,
        max_blocks=max_blocks, blocks_used=k,
        n_samples=(sum(len(b) for b in base), sum(len(b) for b in cand)),
        decisive=decisive, stopped_early=decisive and k < max_blocks, looks=looks, result=result)


# --------------------------------------------------------------------------------------------
# overrules, memory, cost


def quality_overrule(verdict: Verdict, q: QualityGuard | None) -> Overrule | None:
    """A speed verdict in the light of quality: past the margin is a regression whatever the speed;
    a faster candidate whose quality was not shown within the margin is not yet an improvement."""
    if q is None or q.verdict is None:
        return None
    if q.verdict == "past margin":
        return Overrule(by="quality", was=verdict, verdict="regressed",
                        reason=f"quality regressed past its margin: {q.note}")
    if q.verdict == "unclear" and verdict == "improved":
        return Overrule(by="quality", was=verdict, verdict="inconclusive",
                        reason=f"faster, but its quality was not shown within the margin: {q.note}")
    return None


def memory_readout(blocks: list[BlockRecord]) -> MemoryReadout | None:
    """Each arm's resident memory (and its mapped model file's, and its GPU memory), the median over
    its valid blocks; None when no block has one."""
    def med(arm: str, attr: str) -> int | None:
        v = [getattr(b, attr) for b in blocks if b.arm == arm and b.generator_valid and getattr(b, attr) is not None]
        return int(statistics.median(v)) if v else None

    m = MemoryReadout(baseline_bytes=med("baseline", "resident_bytes"), candidate_bytes=med("candidate", "resident_bytes"),
                      baseline_weights_bytes=med("baseline", "weights_resident_bytes"),
                      candidate_weights_bytes=med("candidate", "weights_resident_bytes"),
                      baseline_gpu_bytes=med("baseline", "gpu_bytes"), candidate_gpu_bytes=med("candidate", "gpu_bytes"))
    return None if m.baseline_bytes is None and m.candidate_bytes is None else m


def _cost(pricing: Pricing | None, note: str | None, judged_blocks: ByBlock,
          estimates: dict[tuple[str, str], stats.Estimate], alpha: float) -> tuple[ExperimentCost | None, str | None]:
    if pricing is None:  # no price: no cost shown (not a zero), or why a configured price gave none
        return None, note
    if not judged_blocks:
        return None, "no valid block to read throughput from"
    # The design's own estimate where it judged the readout; else this readout's only estimate.
    throughput, goodput = (judged(m, estimates.get((m, s)) or _estimate(judged_blocks, m, s), False, MARGIN, alpha)
                           for m, s in COST_READOUTS)
    return experiment_cost(pricing, throughput, goodput), None


# --------------------------------------------------------------------------------------------
# the judgement


def judge(design: Design, by_block: ByBlock, blocks: list[BlockRecord], *, looks: list[Look],
          aborted: str | None = None, stop_reason: str | None = None, out_of_reach: str | None = None,
          quality: QualityGuard | None = None, pricing: Pricing | None = None,
          cost_note: str | None = None) -> Judgement:
    """The experiment's judgement from everything its run recorded: the blocks (all of them, with
    their records; only the valid ones are judged), the looks taken, how the run ended (aborted, or
    stopped because a verdict was out of reach), the quality guard, and the price."""
    judged_blocks = valid(by_block, blocks)
    level = looks[-1].alpha if looks else design.stopping.alpha
    estimates = _estimates(design, judged_blocks) if by_block else {}
    metrics = _family_of(estimates, level)
    primary = metrics[0] if metrics else None
    invalid = (out_of_reach or too_few_valid(blocks)) if not aborted else None
    verdict: Verdict = primary.verdict if primary and not aborted and not invalid else "inconclusive"
    reason = f"aborted: {aborted}" if aborted else invalid or (primary.reason if primary else None)
    overrule = quality_overrule(verdict, quality) if not aborted and not invalid else None
    if overrule is not None:
        verdict, reason = overrule.verdict, overrule.reason
    memory = memory_readout(blocks)
    tpot = next((m for m in metrics if m.metric == "tpot"), None)
    cost, why_no_cost = _cost(pricing, cost_note, judged_blocks, estimates, level)
    return Judgement(
        verdict=verdict, primary_metric=f"{design.primary[0]} {design.primary[1]}",
        ratio=primary.ratio if primary else None, ci=primary.ci if primary else None, reason=reason,
        metrics=metrics, looks=looks, stop_reason=stop_reason or _stopped(design, looks, aborted),
        quality=quality, overrule=overrule, memory=memory,
        explanation=model_swap.explain(memory, tpot, design.fails_means) if design.models else None,
        buckets=per_bucket(judged_blocks, level) if judged_blocks else [], cost=cost, cost_note=why_no_cost)


def _stopped(design: Design, looks: list[Look], aborted: str | None) -> str:
    """Why a run that took no early stop ended when it did."""
    if aborted:
        return f"aborted: {aborted}"
    n = len(looks)
    return (f"reached the planned maximum of {design.blocks_per_arm} blocks per arm"
            + (f" after {n} look{'s' if n != 1 else ''}" if design.stopping.sequential else " (fixed horizon)"))


# --------------------------------------------------------------------------------------------
# capacity at the SLO: both arms searched, the ratio judged from their intervals

CAPACITY_METHOD = ("a rate search per arm (advisor/capacity/search.py), trials interleaved; each end of each "
                   "arm's interval at 1 - alpha/4, their quotients the ratio's interval (Bonferroni)")


class _Bracketed(Protocol):
    low: float | None
    high: float | None


def capacity_bounds(baseline: _Bracketed, candidate: _Bracketed) -> tuple[float, float]:
    """The ratio's interval from the arms' intervals: the candidate's lowest over the baseline's
    highest, and the reverse. An end an arm's search did not bound is 0 or infinity."""
    def at_most(r: _Bracketed) -> float:
        return r.high if r.high is not None else math.inf

    def at_least(r: _Bracketed) -> float:
        return r.low if r.low is not None else 0.0

    lo_den, hi_den = at_most(baseline), at_least(baseline)
    lo = at_least(candidate) / lo_den if lo_den > 0 else math.inf
    hi = at_most(candidate) / hi_den if hi_den > 0 else math.inf
    return lo, hi


def capacity_settled(baseline: _Bracketed, candidate: _Bracketed, margin: float = MARGIN) -> str | None:
    """Why both arms' searches may stop before their widths, or None while a narrower interval could
    still change the verdict. Once both arms are bracketed (a clear pass below a clear fail) and the
    ratio's interval lies beyond the margin, it stays there: an arm's interval only narrows, and the
    estimate lies inside it. So "improved" or "regressed" is final, with a finite interval."""
    if any(r.low is None or r.high is None for r in (baseline, candidate)):
        return None
    lo, hi = capacity_bounds(baseline, candidate)
    if lo > 1 + margin:
        return (f"decided: the candidate held at {candidate.low:.3g}/s, {lo:.3g}x the rate at which the "
                f"baseline broke ({baseline.high:.3g}/s)")
    if hi < 1 - margin:
        return (f"decided: the baseline held at {baseline.low:.3g}/s, {1 / hi:.3g}x the rate at which the "
                f"candidate broke ({candidate.high:.3g}/s)")
    return None


def judge_capacity(baseline: CapacityResult | None, candidate: CapacityResult | None, *, alpha: float = 0.05,
                   aborted: str | None = None, margin: float = MARGIN) -> Judgement:
    """The verdict of a capacity experiment: candidate/baseline capacity at the SLO, its interval
    from both arms' search intervals (each end of each arm's at alpha/4: the ratio's at 1 - alpha),
    judged by the rule of the module docstring, higher is better. An end no search bounded leaves
    the interval open on that side: a verdict still needs the other end past 1."""
    name = "capacity per_s"
    if baseline is None or candidate is None:
        why = f"aborted: {aborted}" if aborted else "an arm's search did not run"
        return Judgement(verdict="inconclusive", primary_metric=name, reason=why, stop_reason=why)
    lo, hi = capacity_bounds(baseline, candidate)
    b, c = baseline.estimate, candidate.estimate
    ratio = c / b if b and c is not None else None
    level = 1 - alpha
    finite = math.isfinite(lo) and math.isfinite(hi)
    head = f"{stats.pct(level)} interval of the ratio [{lo:.3g}, {hi:.3g}]"
    if ratio is not None and finite:
        verdict, reason = classify(ratio, (lo, hi), level, margin, lower_is_better=False)
    elif lo > 1 + margin:
        verdict, reason = "improved", f"{head}: the candidate held beyond where the baseline broke"
    elif hi < 1 - margin:
        verdict, reason = "regressed", f"{head}: the baseline held beyond where the candidate broke"
    else:
        verdict, reason = "inconclusive", (f"{head}: an arm's search left its capacity unbounded "
                                           f"(baseline {baseline.status}, candidate {candidate.status})")
    if aborted:
        verdict, reason = "inconclusive", f"aborted: {aborted}"
    ci = (lo, hi) if finite else None
    metric = MetricResult(metric="capacity", statistic="per_s", lower_is_better=False, baseline_value=b,
                          candidate_value=c, ratio=ratio, ci=ci, level=level, p_value=None, adjusted_p=None,
                          verdict=verdict, method=CAPACITY_METHOD,
                          n_blocks=(len(baseline.trials), len(candidate.trials)),
                          n_samples=(baseline.requests, candidate.requests), margin=margin, reason=reason)
    settled = next((r.stopped for r in (baseline, candidate) if r.status == "decided" and r.stopped), None)
    stop = (f"aborted: {aborted}" if aborted else settled or
            f"both searches ended: baseline {baseline.status}, candidate {candidate.status}")
    return Judgement(verdict=verdict, primary_metric=name, ratio=ratio, ci=ci, reason=reason, metrics=[metric],
                     stop_reason=stop)
