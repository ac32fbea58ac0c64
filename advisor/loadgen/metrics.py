"""Client-side metrics by vLLM bench's definitions, overall and per bucket, warmup excluded, with
the generator's own health: achieved vs planned rate and scheduling lag. A run whose generator
fell behind is invalid, and says why."""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel

from advisor.diagnosis.slo import SLO
from advisor.loadgen.record import RequestRecord
from advisor.loadgen.runner import Run

DEFINITIONS = {
    "ttft": "request sent to first streamed token",
    "tpot": "(E2E - TTFT) / (output tokens - 1), per request",
    "itl": "every gap between streamed chunks, pooled over requests",
    "e2e": "request sent to last token",
    "goodput": "requests per second that met every SLO (TTFT, TPOT, E2E)",
}
# The generator is behind when it cannot hold the plan: sends later than this at p99, or slower.
MAX_LAG_P99_S = 0.050
MIN_ACHIEVED_RATIO = 0.95


class Dist(BaseModel):
    n: int
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None

    @classmethod
    def of(cls, xs: list[float]) -> "Dist":
        xs = [x for x in xs if x is not None and math.isfinite(x)]
        if not xs:
            return cls(n=0)
        a = np.asarray(xs)
        p = np.percentile(a, [50, 90, 95, 99])
        return cls(n=len(xs), mean=float(a.mean()), p50=float(p[0]), p90=float(p[1]), p95=float(p[2]), p99=float(p[3]))


class Stats(BaseModel):
    requests: int
    ok: int
    errors: int
    cancelled: int
    ttft: Dist
    tpot: Dist
    itl: Dist
    e2e: Dist
    output_tokens: Dist
    goodput_rps: float | None
    throughput_rps: float | None
    output_tokens_per_s: float | None


class Generator(BaseModel):
    planned_rate: float | None
    achieved_rate: float | None
    achieved_ratio: float | None
    lag_p50_s: float | None
    lag_p99_s: float | None
    valid: bool
    why_invalid: str | None = None


class Summary(BaseModel):
    overall: Stats
    buckets: dict[str, Stats]
    generator: Generator
    measured_s: float
    warmup_s: float
    definitions: dict[str, str] = DEFINITIONS
    errors_seen: dict[str, int] = {}
    aborted: str | None = None


def _meets(r: RequestRecord, slo: SLO) -> bool:
    """Missing data never meets an SLO; TPOT is undefined (and so not judged) for one-token outputs."""
    if r.ttft is None or r.e2e is None or r.ttft > slo.ttft_p95 or r.e2e > slo.e2e_p99:
        return False
    return r.output_tokens < 2 or (r.tpot is not None and r.tpot <= slo.tpot_p95)


meets_slo = _meets  # the experiments' goodput readout counts the same requests


def _stats(recs: list[RequestRecord], slo: SLO, seconds: float) -> Stats:
    ok = [r for r in recs if r.status == "ok"]
    good = [r for r in ok if _meets(r, slo)]
    per_s = (lambda x: x / seconds) if seconds > 0 else (lambda x: None)
    return Stats(
        requests=len([r for r in recs if r.status != "not_sent"]), ok=len(ok),
        errors=sum(r.status == "error" for r in recs), cancelled=sum(r.status == "cancelled" for r in recs),
        ttft=Dist.of([r.ttft for r in recs if r.status in ("ok", "cancelled")]),
        tpot=Dist.of([r.tpot for r in ok]), itl=Dist.of([g for r in ok for g in r.itls]),
        e2e=Dist.of([r.e2e for r in ok]), output_tokens=Dist.of([r.output_tokens for r in ok]),
        goodput_rps=per_s(len(good)), throughput_rps=per_s(len(ok)),
        output_tokens_per_s=per_s(sum(r.output_tokens for r in ok)))


def _generator(run: Run) -> Generator:
    sent = [r for r in run.records if r.sent_s is not None]
    lags = [r.lag for r in sent if r.lag is not None]
    if run.planned_span_s is None:  # closed loop: there is no schedule to fall behind
        return Generator(planned_rate=None, achieved_rate=None, achieved_ratio=None, lag_p50_s=None,
                         lag_p99_s=None, valid=True)
    scheduled = [r for r in run.records if r.scheduled_s is not None]
    span = run.planned_span_s
    planned = (len(scheduled) - 1) / span if span > 0 and len(scheduled) > 1 else None
    send_span = (max(r.sent_s for r in sent) - min(r.sent_s for r in sent)) if len(sent) > 1 else 0.0
    achieved = (len(sent) - 1) / send_span if send_span > 0 else None
    ratio = achieved / planned if achieved and planned else None
    p50, p99 = (np.percentile(lags, [50, 99]).tolist() if lags else (None, None))
    why = None
    if run.aborted is None and len(sent) < len(scheduled):
        why = f"sent {len(sent)} of {len(scheduled)} planned requests"
    elif p99 is not None and p99 > MAX_LAG_P99_S:
        why = f"scheduling lag p99 {p99 * 1000:.0f} ms > {MAX_LAG_P99_S * 1000:.0f} ms"
    elif ratio is not None and ratio < MIN_ACHIEVED_RATIO:
        why = f"achieved {ratio:.0%} of the planned rate (< {MIN_ACHIEVED_RATIO:.0%})"
    return Generator(planned_rate=planned, achieved_rate=achieved, achieved_ratio=ratio,
                     lag_p50_s=p50, lag_p99_s=p99, valid=why is None, why_invalid=why)


def summarize(run: Run, slo: SLO | None = None, warmup_s: float = 0.0) -> Summary:
    slo = slo or SLO()
    measured = [r for r in run.records if r.scheduled_s is None or r.scheduled_s >= warmup_s]
    sent = [r.sent_s for r in measured if r.sent_s is not None]
    ends = [r.last_token_s or r.sent_s for r in measured if r.sent_s is not None]
    seconds = (max(ends) - min(sent)) if sent and ends else 0.0
    buckets = sorted({r.bucket for r in measured})
    errors: dict[str, int] = {}
    for r in measured:
        if r.error:
            key = r.error.split(":")[0]
            errors[key] = errors.get(key, 0) + 1
    return Summary(overall=_stats(measured, slo, seconds),
                   buckets={b: _stats([r for r in measured if r.bucket == b], slo, seconds) for b in buckets},
                   generator=_generator(run), measured_s=seconds, warmup_s=warmup_s, errors_seen=errors,
                   aborted=run.aborted)
