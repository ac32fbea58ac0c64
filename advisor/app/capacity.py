"""Capacity at the SLO, as a use case: from a target (or a deployment spec) and a traffic shape, the
highest arrival rate at which every SLO holds, with its interval, and the plan for a peak. The CLI
adapts it; nothing else repeats its sequence."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from advisor import net
from advisor.capacity import search as s
from advisor.capacity import trials as tr
from advisor.capacity.result import CapacityResult, plan_peak, result_of
from advisor.cost import PriceError, price_for
from advisor.diagnosis.slo import load_slo
from advisor.errors import AdvisorError
from advisor.experiments.design.deployment import load_deployment
from advisor.loadgen import execute
from advisor.loadgen.loop import run_load
from advisor.loadgen.runner import run as run_requests
from advisor.loadgen.served import context_of, model_of
from advisor.loadgen.workers import run_workers
from advisor.reports.capacity_trend import CapacityTrend, trend
from advisor.fleet.config import WatchedDeployment
from advisor.settings import get_settings
from advisor.experiments.arms.journal import Busy, TargetLock
from advisor.experiments.design.deployment import Deployment
from advisor.experiments.run.session import checked_state_dir
from advisor.units import parse_duration

if TYPE_CHECKING:  # the store (sqlalchemy, alembic: 0.3-0.5 s) loads only where an answer is saved
    from advisor.store import Store

MAX_RATE, MIN_RATE = s.MAX_RATE, s.MIN_RATE


class CapacityError(AdvisorError, ValueError):
    """Bad input for a capacity search: one line."""


@dataclass(frozen=True)
class CapacityRequest:
    target: str | None = None
    deployment: Path | None = None
    slo_file: Path | None = None
    workload_file: Path | None = None
    from_prom: str | None = None
    window_s: float = 3600.0
    model: str | None = None
    start_rate: float | None = None
    max_rate: float = MAX_RATE
    min_rate: float = MIN_RATE
    width: float = 0.10
    trial_requests: int | None = None
    max_duration_s: float | None = None
    max_requests: int | None = None
    peak: float | None = None
    headroom: float = 0.8
    price_per_hour: str | None = None
    workers: int = 1
    # Guardrail for a target serving users: never more than this many times the production rate
    # that --from-prom measured over the window.
    max_rate_multiple: float | None = None
    prom_auth: object | None = None  # advisor.yaml's credentials for from_prom (split off its URL at load)


def _target(req: CapacityRequest) -> tuple[str, str | None, object | None, str, Deployment | None]:
    """(the URL requests go to, the spec's model, the spec's price, what to call it, the spec)."""
    if bool(req.target) == bool(req.deployment):
        raise CapacityError("give exactly one of --target (an engine's URL) or --deployment (a deployment spec)")
    if req.target:
        return req.target, None, None, req.target, None
    dep = load_deployment(req.deployment)
    if dep.launcher == "kubernetes" and not (dep.kubernetes and dep.kubernetes.url):
        raise CapacityError(f"{req.deployment}: a Kubernetes target needs kubernetes.url (its Service) to be "
                            "measured")
    return dep.baseline_url, dep.model, dep.cost, dep.target_url, dep


def run_capacity(req: CapacityRequest, say: Callable[[str], None] = lambda _: None) -> CapacityResult:
    """The search on the live target; CapacityError (or the load generator's errors) in one line."""
    if sum(x is not None for x in (req.workload_file, req.from_prom)) != 1:
        raise CapacityError("give exactly one of --workload (a workload YAML) or --from-prom (the deployment's "
                            "Prometheus: its own traffic shape)")
    if not 0 < req.width < 0.5:
        raise CapacityError(f"--width {req.width:g}: expected a relative half-width between 0 and 0.5 (0.1 = +-10 %)")
    if not 0 < req.headroom <= 1:
        raise CapacityError(f"--headroom {req.headroom:g}: expected a share of capacity in (0, 1]")
    if req.max_rate_multiple is not None and not req.from_prom:
        raise CapacityError("--max-rate-multiple needs the production rate: give --from-prom (the deployment's "
                            "Prometheus, which measures it over the window)")
    if req.min_rate >= req.max_rate:
        raise CapacityError(f"--min-rate {req.min_rate:g} is not below --max-rate {req.max_rate:g}")
    url, spec_model, spec_price, shown, dep = _target(req)
    slo = load_slo(req.slo_file)
    try:
        objs = tr.objectives(slo, set(slo.model_fields_set) if req.slo_file else None)
    except tr.CapacityInputError as e:
        raise CapacityError(f"{req.slo_file}: {e}") from None
    size = req.trial_requests or tr.trial_size(objs)
    warmup = tr.warmup_size(size)
    notes = []
    short = [o for o in objs if s.needed(o.share) > size]
    if short:
        notes.append(f"{size} requests per trial cannot show {', '.join(o.label for o in short)} holding (that needs "
                     f"{max(s.needed(o.share) for o in short)}): those objectives can only break a trial")
    with _holding(dep):
        return _measure(req, url, spec_model, spec_price, shown, slo, objs, size, warmup, notes, say)


@contextmanager
def _holding(dep: Deployment | None) -> Iterator[None]:
    """A deployment spec's target held as an experiment holds it (its lock): a search and an
    experiment on one target would each disturb the other's numbers, and an experiment may restart
    the baseline the search measures. A bare --target has no lock to take."""
    if dep is None:
        yield
        return
    try:
        with TargetLock(checked_state_dir(dep.key)):  # Busy only on entry: the search takes no lock
            yield
    except Busy as e:
        raise CapacityError(f"capacity of {dep.name} not measured now: {e}") from None


def _measure(req: CapacityRequest, url: str, spec_model, spec_price, shown: str, slo, objs, size: int,
             warmup: int, notes: list[str], say: Callable[[str], None]) -> CapacityResult:
    settings = get_settings()
    target, http = net.target(url, "engine", "--target")
    prom, prom_http = net.target(req.from_prom, "prom", "--from-prom") if req.from_prom else (None, None)
    if req.prom_auth is not None:
        prom_http = net.config("prom", auth=req.prom_auth)
    say(f"preparing {size + warmup} requests of the traffic shape (prompts sized for the target's tokenizer)")
    job = execute.prepare(target, workload_file=req.workload_file, from_prom=prom, window_s=req.window_s,
                          model=req.model or spec_model, timeout=settings.timeout, rate=1.0,
                          model_lookup=lambda t, timeout: model_of(t, http.with_(timeout=timeout)),
                          context_lookup=lambda t, m, timeout: context_of(t, m, http.with_(timeout=timeout)),
                          http=http, prom_http=prom_http, duration_s=1.2 * (size + warmup) + 5)
    job.requests = _enough(job, size + warmup)
    max_rate = req.max_rate
    if req.max_rate_multiple is not None:
        max_rate = _production_ceiling(job, req, prom, notes)

    def send(planned, job_):
        if req.workers > 1:
            return run_workers(job_.target, planned, job_.prompts, workers=req.workers)
        return run_load(run_requests(job_.target, planned, job_.prompts))

    live = tr.LiveTrials(job, objs, slo, send, warmup,
                         prompts_for=lambda reqs, draw: job.prompts_anew(reqs, f"trial-{draw}"))
    start = req.start_rate or _start_rate(job, req, say)
    start = min(start, max_rate)
    limits = s.Limits(start_rate=start, max_rate=max_rate, min_rate=req.min_rate, width=req.width,
                      max_requests=req.max_requests, max_seconds=req.max_duration_s)

    started = datetime.now(timezone.utc)
    say(f"searching from {start:.3g} requests/s ({size} tallied + {warmup} warmup requests a trial, "
        f"objectives: {'; '.join(o.label for o in objs)})")
    answer = s.search(live, objs, limits, on_trial=lambda t: say(tr.trial_line(t, objs)))
    result = result_of(answer, objs, target=shown, model=job.target.model, workload=job.workload.name,
                       started_at=started, alpha=limits.alpha, width=req.width, trial_requests=size,
                       warmup_requests=warmup, notes=notes)
    if req.peak is not None:
        price, units = _price(req, spec_price)
        result.plan = plan_peak(result, req.peak, req.headroom, *price, units)
    return result


def deployment_name(req: CapacityRequest) -> str | None:
    """The name a saved answer is listed under: the deployment spec's (None for a bare --target)."""
    return load_deployment(req.deployment).name if req.deployment else None


def spec_period(watched: WatchedDeployment, floor_s: float) -> float:
    """The period a deployment's page compares capacity over: at least `floor_s`, and at least its
    schedule's interval (a 30-day schedule would leave most 7-day periods without an answer)."""
    every = parse_duration(watched.capacity.every) if watched.capacity is not None else 0.0
    return max(floor_s, every)


def watched_request(watched: WatchedDeployment) -> CapacityRequest:
    """A watched deployment's scheduled capacity run (advisor.yaml's capacity:) as a request: its
    spec's baseline, its own traffic shape from its Prometheus, and the schedule's guardrails."""
    plan = watched.capacity
    if plan is None or watched.deployment is None:
        raise CapacityError(f"{watched.name}: advisor.yaml schedules no capacity run for it (capacity: with a "
                            "deployment spec)")
    return CapacityRequest(deployment=watched.deployment, slo_file=plan.slo or watched.slo, from_prom=watched.prom_url,
                           prom_auth=getattr(watched, "_auth", None), window_s=parse_duration(plan.window),
                           model=watched.model, width=plan.width, trial_requests=plan.trial_requests,
                           max_duration_s=parse_duration(plan.max_duration), max_requests=plan.max_requests,
                           max_rate_multiple=plan.max_rate_multiple)


@dataclass(frozen=True)
class SavedCapacity:
    id: int
    result: CapacityResult


def capacity_watched(watched: WatchedDeployment, store: Store,
                     say: Callable[[str], None] = lambda _: None) -> SavedCapacity:
    """A watched deployment's capacity measured and saved under its deployment spec's name (as
    `advisor capacity --save` and experiments are), as the schedule runs it."""
    req = watched_request(watched)
    result = run_capacity(req, say)
    return SavedCapacity(store.save_capacity(result, deployment=deployment_name(req)), result)


def trend_of(store: Store, spec: str, end: datetime, period_s: float) -> CapacityTrend:
    """A deployment spec's latest capacity in the period ending at `end` beside the latest of the
    period before, as the dashboard and the weekly report show it. A run that answered nothing (a
    search stopped before any trial decided) does not hide an earlier answer of its period."""
    start, earlier = end - timedelta(seconds=period_s), end - timedelta(seconds=2 * period_s)

    def latest(since: datetime, until: datetime):
        rows = store.list_capacity(deployment=spec, since=since, until=until, limit=50)
        return next((c for c in rows if c.low is not None or c.high is not None), None)

    return trend(latest(start, end), latest(earlier, start))


def _production_ceiling(job, req: CapacityRequest, prom: str, notes: list[str]) -> float:
    """The rate ceiling a multiple of the production rate sets, noted; CapacityError where no
    production rate was measured (it is the guardrail's reference, never a guess)."""
    rate = job.source_rate
    if not rate:
        raise CapacityError(f"no production rate measured over the window at {prom}: the rate ceiling "
                            "cannot be set")
    ceiling = min(req.max_rate, req.max_rate_multiple * rate)
    if ceiling <= req.min_rate:
        raise CapacityError(f"the rate ceiling {ceiling:.3g}/s ({req.max_rate_multiple:g} x the production rate "
                            f"{rate:.3g}/s) is not above the floor {req.min_rate:g}/s: nothing to search")
    notes.append(f"rate ceiling {ceiling:.3g} requests/s: {req.max_rate_multiple:g} x the production rate "
                 f"{rate:.3g}/s that Prometheus measured (the target serves users; an answer at the ceiling "
                 "is 'at least')")
    return ceiling


def _enough(job, n: int) -> list:
    """n requests of the prepared job, repeating its draw where it planned fewer (a short workload)."""
    reqs = list(job.requests)
    if not reqs:
        raise CapacityError("the workload plans no request")
    return [reqs[i % len(reqs)] for i in range(n)] if len(reqs) < n else reqs[:n]


def _start_rate(job, req: CapacityRequest, say: Callable[[str], None]) -> float:
    """Where the search starts: the production rate the Prometheus workload measured, else half the
    throughput of a short closed-loop burst (capacity/trials.py burst_start)."""
    if req.from_prom and job.source_rate:
        return min(max(job.source_rate, req.min_rate), req.max_rate)
    try:
        start, throughput, n = tr.burst_start(job, req.min_rate, req.max_rate)
    except tr.CapacityInputError as e:
        raise CapacityError(str(e)) from None
    say(f"a burst of {n} requests, {tr.PROBE_CONCURRENCY} at a time, completed {throughput:.3g}/s: starting at half")
    return start


def _price(req: CapacityRequest, spec_price) -> tuple[tuple[float | None, str | None], int | None]:
    try:
        price = price_for(req.price_per_hour, (spec_price, f"deployment spec {req.deployment}"))
    except PriceError as e:
        raise CapacityError(str(e)) from None
    if price is None:
        return (None, None), None
    units = price.spec.accelerators or 1
    return (price.spec.per_hour, price.spec.currency), units
