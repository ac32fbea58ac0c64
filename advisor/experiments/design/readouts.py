"""The one readout vocabulary: what the knob catalog may name (advisor/knobs/catalog.yaml
`readouts`), what a Design reads, and what the runner measures and judges.

A readout is a (metric, statistic) pair of two kinds:

* per-request readouts: ttft, tpot, itl, e2e (seconds, lower is better) with p50, p95, p99 or mean;
  urgent_ttft and urgent_e2e are TTFT and E2E of the block's most urgent priority class only (the
  lowest `priority` its workload sends; every request when it sends none), what priority
  scheduling is for. Each block contributes its requests' samples; stats.compare judges them with the block as the unit
  (a rank test on block medians for p50, a bootstrap over blocks for the tails and the mean).
* block readouts: one value per block, computed over the block's own duration (from its first
  send to its last completion), so that a slower arm is not credited with the idle time of a fixed
  window:
    output_tokens per_s  generated tokens of the ok requests per second (higher is better)
    throughput per_s     ok requests per second (higher is better)
    goodput per_s        ok requests that met every SLO (TTFT, TPOT, E2E) per second (higher is better)
    errors ratio         (errored + 0.5) / (sent + 1): the share of requests that failed, with half a
                         pseudo-count so that a block without errors (the usual case) has a defined
                         ratio; two error-free arms then compare as equal (lower is better)
  stats.compare judges them with each block as one sample: Hodges-Lehmann ratio of medians with
  its exact Mann-Whitney interval.

The names (which readouts exist, which are block readouts, which way is better) are in
advisor/readout_vocabulary.py, below the knob catalog that names them too.
"""

from __future__ import annotations

from collections.abc import Sequence

from advisor.diagnosis.slo import SLO
from advisor.loadgen.metrics import meets_slo
from advisor.readout_vocabulary import BLOCK_READOUTS, REQUEST_METRICS, URGENT, is_block_readout, known, names


def request_values(records: Sequence, metric: str) -> list[float]:
    """One block's per-request samples of a request metric (TTFT also of cancelled requests)."""
    if metric in URGENT:
        classes = [r.priority for r in records if r.priority is not None]
        if classes:
            records = [r for r in records if r.priority == min(classes)]
        metric = URGENT[metric]
    if metric == "ttft":
        return [r.ttft for r in records if r.status in ("ok", "cancelled") and r.ttft is not None]
    ok = [r for r in records if r.status == "ok"]
    if metric == "itl":
        return [g for r in ok for g in r.itls]
    if metric in ("tpot", "e2e"):
        return [v for v in (getattr(r, metric) for r in ok) if v is not None]
    raise ValueError(f"{metric!r} is not a per-request readout ({', '.join(REQUEST_METRICS)})")


def block_duration(records: Sequence) -> float | None:
    """The block's own duration: its first send to its last completion (the latest time any of its
    requests was last heard from). None when nothing was sent."""
    sent = [r.sent_s for r in records if r.sent_s is not None]
    if not sent:
        return None
    ends = [t for r in records for t in (r.last_token_s, r.first_token_s, r.sent_s) if t is not None]
    span = max(ends) - min(sent)
    return span if span > 0 else None


def block_value(records: Sequence, metric: str, slo=None) -> float | None:
    """One block's value of a block readout; None when it is undefined (nothing sent)."""
    sent = [r for r in records if r.status != "not_sent"]
    if metric == "errors":
        if not sent:
            return None
        return (sum(r.status == "error" for r in sent) + 0.5) / (len(sent) + 1)
    seconds = block_duration(records)
    if seconds is None:
        return None
    ok = [r for r in records if r.status == "ok"]
    if metric == "output_tokens":
        return sum(r.output_tokens for r in ok) / seconds
    if metric == "throughput":
        return len(ok) / seconds
    if metric == "goodput":
        slo = slo or SLO()
        return sum(meets_slo(r, slo) for r in ok) / seconds
    raise ValueError(f"{metric!r} is not a block readout ({', '.join(BLOCK_READOUTS)})")


def block_samples(records: Sequence, metric: str, statistic: str, slo=None) -> list[float | None]:
    """What one block gives the judge for a readout: its requests' samples, or its one value."""
    if not known(metric, statistic):
        raise ValueError(f"unknown readout {metric} {statistic} (known: {', '.join(names())})")
    if is_block_readout(metric, statistic):
        return [block_value(records, metric, slo)]
    return request_values(records, metric)
