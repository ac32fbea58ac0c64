"""The weekly report: per deployment, SLO attainment over the period, daily TTFT/TPOT/E2E
percentiles against the period before, findings that appeared, persisted or disappeared, the
experiments run and their verdicts, the next change to make, and the drift of the traffic shape.

Every Prometheus number comes through probes.probe_prometheus evaluated at past instants (`at`),
so a signal means here what it means in a diagnosis. SLO attainment is the share of the period's
hours, among those with traffic, in which each SLO held (each hour read as a 1 h window).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from markupsafe import Markup

from advisor.diagnosis.slo import SLO, load_slo
from advisor.errors import AdvisorError
from advisor.fleet.config import FleetConfig, WatchedDeployment
from advisor.reports import charts, views
from advisor import net
from advisor.app.capacity import trend_of
from advisor.app.watched import spec_name
from advisor.reports.capacity_trend import CapacityTrend
from advisor.reports import html
from advisor.settings import get_settings
from probes import probe_prometheus

DAY = 86400.0
HOUR = 3600.0
# SLO name -> the signal it is judged on; error_rate is a share, the others seconds.
SLO_SIGNALS = {"ttft_p95": "ttft_p95", "tpot_p95": "tpot_p95", "e2e_p99": "e2e_p99", "error_rate": "error_rate"}
LATENCY = {"TTFT": "ttft", "TPOT": "tpot", "E2E": "e2e"}
QUANTILES = ("p50", "p95", "p99")
# The traffic shape: what makes an improvement tell apart from a change in demand.
DRIFT = {"request_rate": "requests/s", "prompt_len_p50": "prompt tokens p50", "prompt_len_p95": "prompt tokens p95",
         "output_len_p50": "output tokens p50", "output_len_p95": "output tokens p95"}
# A ratio beyond these reads as drift worth a look.
DRIFT_FLAG = (0.8, 1.25)
PROBE_THREADS = 8


@dataclass
class SloRow:
    name: str
    threshold: str
    attainment: str
    hours: int
    held: int


@dataclass
class DriftRow:
    name: str
    before: str
    now: str
    ratio: str
    flagged: bool


@dataclass
class WeekExperiment:
    id: int
    key: str
    title: str  # "max_num_seqs -> 8", or an A/A run
    status: str
    verdict: str
    ratio: str


@dataclass
class DeploymentWeek:
    name: str
    prom_url: str
    slo: list[SloRow] = field(default_factory=list)
    charts: dict[str, Markup] = field(default_factory=dict)
    daily: dict[str, dict[str, list[float | None]]] = field(default_factory=dict)
    previous: dict[str, dict[str, list[float | None]]] = field(default_factory=dict)
    appeared: list[str] = field(default_factory=list)
    persisted: list[str] = field(default_factory=list)
    disappeared: list[str] = field(default_factory=list)
    experiments: list[WeekExperiment] = field(default_factory=list)
    next_change: str = "none known: this deployment has no diagnosis yet"
    proven: str = "-"
    drift: list[DriftRow] = field(default_factory=list)
    capacity: CapacityTrend | None = None  # where advisor.yaml schedules capacity runs, or one was saved
    problems: list[str] = field(default_factory=list)


@dataclass
class WeeklyView:
    title: str
    period: str
    generated: str
    days: list[str]
    deployments: list[DeploymentWeek]


def _values(w: WatchedDeployment, window_s: float, instants: list[datetime], names: list[str]) -> list[dict]:
    """Each instant's signals (name -> value or None), read concurrently."""

    url, http = net.target(w.prom_url, "prom", f"{w.name}.prom_url")
    timeout = get_settings().timeout

    def one(at: datetime) -> dict:
        snap = probe_prometheus(url, window_s=window_s, model=w.model, at=at, timeout=timeout, per_replica=False,
                                http=http)
        return {n: snap.value(n) for n in names}

    with ThreadPoolExecutor(PROBE_THREADS) as pool:
        return list(pool.map(one, instants))


def _fmt(v: float | None, unit: str = "") -> str:
    return "-" if v is None else f"{v:.3g}{unit}"


def _slo_rows(slo: SLO, hourly: list[dict]) -> list[SloRow]:
    rows = []
    traffic = [h for h in hourly if h.get("request_rate")]
    for name, signal in SLO_SIGNALS.items():
        limit = getattr(slo, name)
        seen = [h[signal] for h in traffic if h.get(signal) is not None]
        held = sum(v <= limit for v in seen)
        share = f"{100 * held / len(seen):.1f} %" if seen else "no traffic"
        rows.append(SloRow(name, f"{limit:g}" + ("" if name == "error_rate" else " s"), share, len(seen), held))
    return rows


def _rules(records) -> set[str]:
    return {f"{r.rule_id} {r.symptom}" for r in records}


def deployment_week(w: WatchedDeployment, store, end: datetime, period_s: float) -> DeploymentWeek:
    week = DeploymentWeek(w.name, w.prom_url)
    start, before = end - timedelta(seconds=period_s), end - timedelta(seconds=2 * period_s)
    days = max(1, round(period_s / DAY))
    # Store first: it answers even when Prometheus does not.
    now_f = store.findings_history(deployment=w.name, since=start, until=end)
    then_f = store.findings_history(deployment=w.name, since=before, until=start)
    week.appeared = sorted(_rules(now_f) - _rules(then_f))
    week.persisted = sorted(_rules(now_f) & _rules(then_f))
    week.disappeared = sorted(_rules(then_f) - _rules(now_f))
    _experiments(week, w, store, start, end)
    _capacity(week, w, store, end, period_s)
    try:
        slo = load_slo(w.slo)
        latency = [f"{m}_{q}" for m in LATENCY.values() for q in QUANTILES]
        day_ends = [end - timedelta(days=days - 1 - i) for i in range(days)]
        prev_ends = [d - timedelta(seconds=period_s) for d in day_ends]
        daily = _values(w, DAY, day_ends + prev_ends, latency)
        for label, metric in LATENCY.items():
            week.daily[label] = {q: [d[f"{metric}_{q}"] for d in daily[:days]] for q in QUANTILES}
            week.previous[label] = {q: [d[f"{metric}_{q}"] for d in daily[days:]] for q in QUANTILES}
            week.charts[label] = charts.daily(day_ends, week.daily[label], week.previous[label],
                                              f"{label} (s)", f"{w.name}: daily {label} percentiles")
        hours = [end - timedelta(hours=h) for h in range(int(period_s // HOUR))]
        hourly = _values(w, HOUR, hours, [*set(SLO_SIGNALS.values()), "request_rate"])
        week.slo = _slo_rows(slo, hourly)
        shape_now, shape_then = _values(w, period_s, [end, start], list(DRIFT))
        for name, label in DRIFT.items():
            a, b = shape_then[name], shape_now[name]
            ratio = b / a if a and b is not None else None
            week.drift.append(DriftRow(label, _fmt(a), _fmt(b), views.ratio_text(ratio),
                                       ratio is not None and not DRIFT_FLAG[0] <= ratio <= DRIFT_FLAG[1]))
    except AdvisorError as e:
        week.problems.append(f"Prometheus at {w.prom_url}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    return week


def _spec(w: WatchedDeployment) -> str | None:
    """The deployment spec's name, which experiments and capacity answers are stored under."""
    try:
        return spec_name(w) if w.deployment else None
    except AdvisorError:
        return None


def _capacity(week: DeploymentWeek, w: WatchedDeployment, store, end: datetime, period_s: float) -> None:
    """Shown where advisor.yaml schedules capacity runs, or either period holds an answer."""
    name = _spec(w)
    found = trend_of(store, name, end, period_s) if name else None
    if found is not None and (w.capacity is not None or found.latest_id is not None or found.before != "-"):
        week.capacity = found


def _experiments(week: DeploymentWeek, w: WatchedDeployment, store, start: datetime, end: datetime) -> None:
    name = _spec(w)
    found = [e for e in store.list_experiments(deployment=name, limit=500) if start <= e.created_at < end] \
        if name else []
    week.experiments = [WeekExperiment(e.id, e.key, views.experiment_title(e.mechanism, e.value), e.status,
                                       e.verdict or "-", views.ratio_text(e.ratio)) for e in found]
    last = store.list_diagnoses(deployment=w.name, limit=1)
    if not last:
        return
    if not last[0].findings_count:  # healthy with warnings still names what to change next
        week.next_change = f"none: the last diagnosis (diagnosis {last[0].id}) found nothing to change"
        return
    d = store.get_diagnosis(last[0].id)
    top = next((c for c in d.checks if not c.held_back and not c.already), None)
    if top is None:
        week.next_change = "none testable: every check is held back or already in effect"
        return
    week.next_change = f"{top.title} ({top.mechanism}{' ' + top.direction if top.direction else ''}), " \
                       f"from diagnosis {last[0].id}"
    proof = next((e for e in found if e.mechanism == top.mechanism and e.status == "finished"), None)
    week.proven = (f"proven: {proof.verdict}, ratio {views.ratio_text(proof.ratio)} (experiment {proof.id})"
                   if proof and proof.verdict == "improved" else
                   f"not proven: experiment {proof.id} read {proof.verdict}" if proof else
                   "not proven yet: no experiment of it this period")


def weekly_view(config: FleetConfig, store, deployment: str | None = None, period_s: float = 7 * DAY,
                end: datetime | None = None) -> WeeklyView:
    end = end or datetime.now(timezone.utc)
    chosen = [d for d in config.deployments if deployment is None or d.name == deployment]
    start = end - timedelta(seconds=period_s)
    days = max(1, round(period_s / DAY))
    return WeeklyView(
        title="Weekly report" + (f": {deployment}" if deployment else ""),
        period=f"{views.when(start)} to {views.when(end)}, against the {days} days before",
        generated=views.when(datetime.now(timezone.utc)),
        days=[(end - timedelta(days=days - 1 - i)).strftime("%a %d %b") for i in range(days)],
        deployments=[deployment_week(w, store, end, period_s) for w in chosen])


def weekly_report(config: FleetConfig, store, fmt: str = "html", deployment: str | None = None,
                  period_s: float = 7 * DAY, end: datetime | None = None) -> str:
    return render(weekly_view(config, store, deployment, period_s, end), fmt)


def render(view: WeeklyView, fmt: str) -> str:
    if fmt == "markdown":
        from advisor.reports.markdown import render

        return render("weekly.md.j2", v=view)

    return html.render("weekly.html.j2", v=view)
