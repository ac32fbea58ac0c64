"""A capacity trial on a live target: the deployment's own traffic shape at one arrival rate, run by
the load generator, tallied per objective.

The requests (their buckets, lengths, prefixes, cancellations and sized prompts) are prepared once
and replayed at every rate: only the arrival times change, drawn afresh for each trial from the
workload's own arrival process (Poisson, or gamma with its burstiness) at that rate, so two trials
differ in the rate and the draw, never in what is asked. The first `warmup` requests of a trial
are sent and not tallied (warmup_size): a trial starts on an idle engine.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable
from dataclasses import replace

from advisor.capacity.result import percentile_text
from advisor.capacity.search import Objective, Tally, Trial, TrialResult, needed, tally
from advisor.diagnosis.slo import SLO
from advisor.loadgen.execute import Job
from advisor.loadgen.loop import run_load
from advisor.loadgen.metrics import summarize
from advisor.loadgen.record import RequestRecord
from advisor.loadgen.runner import run as run_requests
from advisor.workload.plan import gaps
from advisor.workload.spec import Arrival, Workload

# SLO fields read as objectives: (the share that must be within, the metric, what a user reads).
LATENCY = {"ttft_p95": (0.95, "ttft", "TTFT p95"), "tpot_p95": (0.95, "tpot", "TPOT p95"),
           "e2e_p99": (0.99, "e2e", "E2E p99")}


class CapacityInputError(ValueError):
    pass


def objectives(slo: SLO, named: set[str] | None) -> list[Objective]:
    """The SLO file's objectives, as shares; named: the fields the file sets (None: no file, every
    default). A file that sets no latency SLO gives nothing to search for."""
    fields = set(LATENCY) | {"error_rate"} if named is None else named
    out = [Objective(k, share, getattr(slo, k), f"{label} <= {_seconds(getattr(slo, k))}")
           for k, (share, _, label) in LATENCY.items() if k in fields]
    if not out:
        raise CapacityInputError("the SLO file sets no latency SLO (ttft_p95, tpot_p95 or e2e_p99): capacity is "
                                 "the rate at which one holds")
    if "error_rate" in fields:
        out.append(Objective("error_rate", 1 - slo.error_rate, None, f"errors <= {slo.error_rate:.3g}"))
    return out


def _seconds(x: float) -> str:
    return f"{x * 1000:.0f} ms" if x < 1 else f"{x:g} s"


def trial_size(objs: list[Objective]) -> int:
    """Requests a trial tallies: enough that its strictest share can be shown to hold (a p99 needs
    299), and never under 200 (the simulated calibration's size: tests/unit/test_capacity_search.py)."""
    return max(200, *(needed(o.share) for o in objs))


def warmup_size(size: int) -> int:
    """Requests a trial sends before its tally: it starts on an idle engine, whose queue's first
    requests wait less than its steady state's. On the simulated queue (300 seeds a shape), 25 before
    a 200-request tally covered the truth as often as 100 (91/96/94 % against 89/94/93 %) in 23 % fewer
    requests, while 25 before 86 lost 4 points of coverage to 43 (the transient weighs more in a short
    tally). So: 25 at the default size, half of a short tally (as before: 43 for 86, 30 for 60), a
    warmup x size near 5,000 between, and an eighth of a longer one."""
    return max(10, size // 8, min(size // 2, 5000 // size))


def _value(r: RequestRecord, metric: str) -> float | None:
    """The request's value for the metric; inf for a failed request (it meets no latency SLO), None
    where the metric says nothing (a cancelled request's end, a one-token answer's TPOT)."""
    if r.status == "error":
        return math.inf
    if metric == "ttft":
        return r.ttft if r.ttft is not None else math.inf
    if r.status != "ok":
        return None
    if metric == "tpot":
        return r.tpot if r.output_tokens >= 2 else None
    return r.e2e if r.e2e is not None else math.inf


def tallies(records: list[RequestRecord], objs: list[Objective]) -> dict[str, Tally]:
    """Per objective, the requests within it in their order of arrival."""
    sent = sorted((r for r in records if r.status != "not_sent"), key=lambda r: r.sent_s or 0.0)
    out = {}
    for o in objs:
        if o.threshold is None:  # the error rate
            within = [r.status != "error" for r in sent]
            out[o.name] = tally(within)
            continue
        metric = LATENCY[o.name][1]
        vals = [v for v in (_value(r, metric) for r in sent) if v is not None]
        out[o.name] = tally([v <= o.threshold for v in vals], vals, o.threshold)
    return out


class LiveTrials:
    """`run(rate)` for the search: the job's requests at that rate, the first `warmup` untallied.

    run_requests(requests, job) sends them and returns the load generator's Run (in a worker pool
    or in this process: the caller's choice). prompts_for(requests, draw): each trial's prompt
    texts, the same sizes in other words for every draw, so that no trial is served from the
    prefix cache that an earlier one filled (a later trial would otherwise skip its prefills and
    hold at a higher rate than the traffic allows); None: the job's own texts every time."""

    def __init__(self, job: Job, objs: list[Objective], slo: SLO, run_requests: Callable, warmup: int,
                 seed: int = 0, prompts_for: Callable[[list, int], dict[int, str]] | None = None):
        self.job, self.objs, self.slo, self.warmup = job, objs, slo, warmup
        self.run_requests = run_requests
        self.prompts_for = prompts_for
        self._draw = itertools.count(seed)

    def arrivals(self, rate: float, n: int, draw: int) -> list[float]:
        w: Workload = self.job.workload
        kind = w.arrival.kind if w.arrival.kind != "concurrency" else "poisson"
        at = Workload.model_validate({**w.model_dump(), "arrival": Arrival(kind=kind, rate=rate,
                                                                            burstiness=w.arrival.burstiness)})
        g, t, out = gaps(at, random.Random(draw)), 0.0, []
        for i in range(n):
            t += next(g) if i else 0.0
            out.append(t)
        return out

    def __call__(self, rate: float) -> TrialResult:
        draw = next(self._draw)
        reqs = list(self.job.requests)
        # Another order for each draw: a request is not always sent at the same point of the trial.
        k = (draw * 7919) % len(reqs)
        reqs = reqs[k:] + reqs[:k]
        times = self.arrivals(rate, len(reqs), draw)
        planned = [replace(r, at_s=t) for r, t in zip(reqs, times)]
        job = self.job if self.prompts_for is None else replace(self.job, prompts=self.prompts_for(planned, draw))
        run = self.run_requests(planned, job)
        warm_s = times[self.warmup] if self.warmup < len(times) else times[-1]
        measured = [r for r in run.records if r.scheduled_s is not None and r.scheduled_s >= warm_s]
        summary = summarize(run, self.slo, warmup_s=warm_s)
        g = summary.generator
        why = g.why_invalid or run.aborted
        seconds = run.wall_s
        return TrialResult(tallies=tallies(measured, self.objs), requests=len(planned), seconds=seconds,
                           valid=g.valid and run.aborted is None, why_invalid=why,
                           goodput_rps=summary.overall.goodput_rps,
                           output_tokens_per_s=summary.overall.output_tokens_per_s)


PROBE_REQUESTS, PROBE_CONCURRENCY = 32, 8


def trial_line(t: Trial, objs: list[Objective]) -> str:
    """A trial as a progress line: its rate, outcome and each objective's share within; for an
    unclear trial, why its share could not be told from the target."""
    share = ", ".join(f"{o.label.split(' <=')[0]} {t.tallies[o.name].share:.1%}{_percentile(t.tallies[o.name], o)}"
                      for o in objs if o.name in t.tallies and t.tallies[o.name].share is not None)
    more = f" (+{t.extended} extension{'s' if t.extended > 1 else ''})" if t.extended else ""
    return (f"{t.rate:8.3g} req/s: {t.outcome:8} {share}{more}"
            + ("" if t.valid else f" - load generator invalid: {t.why_invalid}") + _why_unclear(t, objs))


def _percentile(tl: Tally, o: Objective) -> str:
    return percentile_text(o.share, tl.quantile(o.share)) if o.threshold is not None else ""


def _why_unclear(t: Trial, objs: list[Objective]) -> str:
    # "Unclear at 100.0 % within" reads as a bug unless the line says what the evidence was worth:
    # latencies that come in runs (a backlog) count as fewer independent requests (search.Tally).
    o = next((o for o in objs if o.name == t.decided_by), None)
    tl = t.tallies.get(t.decided_by)
    if t.outcome != "unclear" or not t.valid or o is None or not (tl and tl.n):
        return ""
    _, worth = tl.effective()
    runs = f" carrying the evidence of {worth:.0f} (their latencies come in runs)" if worth < tl.n - 0.5 else ""
    return f": {tl.n} requests{runs}, too few to tell from {o.share:.0%}"


def burst_throughput(job: Job) -> tuple[float, int]:
    """(requests completed per second, requests sent) by a short closed-loop burst of the job's
    requests (PROBE_REQUESTS, PROBE_CONCURRENCY at a time): where a search starts, at half of it.
    An open-loop rate above what the engine completes cannot hold, and trials at low rates are long."""
    n = min(PROBE_REQUESTS, len(job.requests))
    burst = [replace(r, at_s=None) for r in job.requests[:n]]
    run = run_load(run_requests(job.target, burst, job.prompts, concurrency=PROBE_CONCURRENCY))
    ok = [r for r in run.records if r.status == "ok"]
    if not ok or run.wall_s <= 0:
        raise CapacityInputError(f"none of {n} requests to {job.target.url} succeeded before the search: "
                                 f"{next((r.error for r in run.records if r.error), 'no answer')}")
    return len(ok) / run.wall_s, n


def burst_start(job: Job, lo: float, hi: float) -> tuple[float, float, int]:
    """(start rate, burst throughput, requests sent): half the burst's throughput, within [lo, hi]."""
    throughput, n = burst_throughput(job)
    return min(max(throughput / 2, lo), hi), throughput, n

