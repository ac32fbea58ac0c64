"""The dashboard's pages: the fleet at /, a deployment, a diagnosis, an experiment (live while it
runs), the rules catalog, and report downloads. Server-rendered; the little script there is only
drives the actions and the live experiment."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from fastapi import APIRouter, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, Response

from advisor.diagnosis.model import SEVERITY_ORDER
from advisor.reports import charts, documents, html, views
from advisor.web.api import _allowed, _capacity_of, _experiments_of, _or_404, _spec_of, watched_of_experiment
from advisor.web.context import Ctx, StoreId, Watched
from advisor.web.security import COOKIE, Reader
from advisor.app.capacity import spec_period, trend_of
from advisor.app.weekly import weekly_report
from advisor.reports import capacity_text
from advisor.reports.capacity_trend import figure as capacity_figure
from advisor.diagnosis import load_rules
from advisor.units import parse_duration
from advisor.web.security import _matches, _same_origin

router = APIRouter(include_in_schema=False)
MAX_WEEKLY_S = 31 * 86400
WEEK_S = 7 * 86400  # the deployment page's capacity: the last 7 days against the 7 before


def _page(template: str, ctx, **context) -> HTMLResponse:
    return HTMLResponse(html.render(template, dashboard=True, actions=ctx.token is not None, **context))


def _download(text: str, name: str) -> Response:
    return Response(text, media_type="text/html; charset=utf-8",
                    headers={"Content-Disposition": f'attachment; filename="{name}"'})


@router.get("/", response_class=HTMLResponse)
def fleet(ctx: Ctx, _: Reader) -> HTMLResponse:
    week_ago = datetime.now(timezone.utc) - timedelta(days=7)
    rows = []
    for w in ctx.config.deployments:
        history = ctx.store.list_diagnoses(deployment=w.name, since=week_ago, limit=2000)
        latest = ctx.store.list_diagnoses(deployment=w.name, limit=1)  # may be older than the week
        last = latest[0] if latest else None
        top = None
        if last and last.findings_count:  # a breach, or warnings before one
            d = ctx.store.get_diagnosis(last.id)
            top = max(d.findings, key=lambda f: SEVERITY_ORDER.get(f.severity, 0), default=None)
        spark = [s.ttft_p95 for s in reversed(history)]
        rows.append({"w": w, "last": last, "when": views.when(last.created_at) if last else "never",
                     "top": top, "spark": charts.sparkline(spark, f"{w.name} TTFT p95, last 7 days")
                     if any(v is not None for v in spark) else None})
    return _page("fleet.html.j2", ctx, rows=rows)


@router.get("/deployments/{name}", response_class=HTMLResponse)
def deployment(w: Watched, ctx: Ctx, _: Reader) -> HTMLResponse:
    diagnoses = ctx.store.list_diagnoses(deployment=w.name, limit=100)
    since = datetime.now(timezone.utc) - timedelta(days=28)
    findings = ctx.store.findings_history(deployment=w.name, since=since)
    by_rule: dict[str, dict] = {}
    for f in findings:
        row = by_rule.setdefault(f.rule_id, {"rule": f.rule_id, "symptom": f.symptom, "count": 0, "first": f.created_at,
                                             "last": f.created_at, "severity": f.severity})
        row["count"] += 1
        row["last"], row["severity"] = f.created_at, f.severity
    spec, period = _spec_of(w), spec_period(w, WEEK_S)
    capacity = trend_of(ctx.store, spec, datetime.now(timezone.utc), period) if spec else None
    return _page("deployment.html.j2", ctx, w=w, diagnoses=diagnoses, experiments=_experiments_of(ctx, w),
                 findings=sorted(by_rule.values(), key=lambda r: r["last"], reverse=True), when=views.when,
                 capacity=capacity, capacity_days=round(period / 86400), capacity_runs=_capacity_of(ctx, w, 20),
                 figure=capacity_figure)


def _capacity_page(ctx, run_id: int) -> str:
    summary, doc = _or_404(lambda: ctx.store.get_capacity(run_id))
    watched = watched_of_experiment(ctx, summary.deployment, "a capacity search")
    return capacity_text.html(documents.stored_capacity(run_id, doc), dashboard=True, deployment=watched)


@router.get("/capacity/{run_id}", response_class=HTMLResponse)
async def capacity_run(run_id: StoreId, ctx: Ctx, _: Reader) -> HTMLResponse:
    """A stored capacity answer with its attainment chart, as `advisor capacity --output html` wrote it."""
    return HTMLResponse(await run_in_threadpool(_capacity_page, ctx, run_id))


def _diagnosis_html(ctx, diagnosis_id: int, dashboard: bool) -> str:
    summary = _or_404(lambda: ctx.store.get_diagnosis_summary(diagnosis_id))
    _allowed(ctx, summary.deployment)
    if not dashboard:
        return documents.stored_diagnosis(ctx.store, diagnosis_id, "html")
    view = documents.stored_diagnosis_view(ctx.store, diagnosis_id)
    testable = ctx.config.get(summary.deployment).deployment is not None
    return html.render("diagnosis.html.j2", d=view, dashboard=True, actions=ctx.token is not None,
                       testable=testable)


@router.get("/diagnoses/{diagnosis_id}", response_class=HTMLResponse)
async def diagnosis(diagnosis_id: StoreId, ctx: Ctx, _: Reader) -> HTMLResponse:
    return HTMLResponse(await run_in_threadpool(_diagnosis_html, ctx, diagnosis_id, True))


@router.get("/diagnoses/{diagnosis_id}/report.html")
async def diagnosis_download(diagnosis_id: StoreId, ctx: Ctx, _: Reader) -> Response:
    text = await run_in_threadpool(_diagnosis_html, ctx, diagnosis_id, False)
    return _download(text, f"diagnosis-{diagnosis_id}.html")


def _experiment_view(ctx, experiment_id: int):
    """The view and the advisor.yaml name of its deployment (experiments are stored under the spec's)."""
    view = _or_404(lambda: documents.stored_experiment_view(ctx.store, experiment_id))
    return view, watched_of_experiment(ctx, view.deployment)


@router.get("/experiments/{experiment_id}", response_class=HTMLResponse)
async def experiment(experiment_id: StoreId, ctx: Ctx, _: Reader, fragment: bool = False) -> HTMLResponse:
    view, watched = await run_in_threadpool(_experiment_view, ctx, experiment_id)
    if fragment:  # the running page's refresh: just the body
        return HTMLResponse(html.render("_experiment_body.html.j2", x=view))
    return _page("experiment.html.j2", ctx, x=view, watched=watched)


@router.get("/experiments/{experiment_id}/report.html")
async def experiment_download(experiment_id: StoreId, ctx: Ctx, _: Reader) -> Response:
    view, _watched = await run_in_threadpool(_experiment_view, ctx, experiment_id)
    return _download(html.render("experiment.html.j2", x=view), f"experiment-{experiment_id}.html")


@router.get("/rules", response_class=HTMLResponse)
def rules(ctx: Ctx, _: Reader) -> HTMLResponse:
    return _page("rules.html.j2", ctx, rules=load_rules())


@router.get("/rules/{rule_id}", response_class=HTMLResponse)
def rule(rule_id: str, ctx: Ctx, _: Reader) -> HTMLResponse:
    found = {r.id: r for r in load_rules()}.get(rule_id.upper())
    if found is None:
        raise HTTPException(404, f"no rule {rule_id!r}")
    return _page("rule.html.j2", ctx, r=found)


@router.get("/reports/weekly")
async def weekly(ctx: Ctx, _: Reader, deployment: str | None = None, since: str = "7d") -> Response:
    try:
        period = parse_duration(since)
    except ValueError as e:
        raise HTTPException(422, f"since: {e}") from None
    if period > MAX_WEEKLY_S:
        # Each hour is a Prometheus read: a page anyone may open must not ask for years of them.
        raise HTTPException(422, f"since: at most {MAX_WEEKLY_S / 86400:.0f}d from the dashboard "
                                 "(advisor report weekly takes any period)")
    if deployment is not None and ctx.config.get(deployment) is None:
        raise HTTPException(404, f"no deployment {deployment!r} in advisor.yaml")
    text = await run_in_threadpool(weekly_report, ctx.config, ctx.store, "html", deployment, period)
    return _download(text, "weekly-report.html")


@router.get("/login", response_class=HTMLResponse)
def login_page(ctx: Ctx) -> HTMLResponse:
    return _page("login.html.j2", ctx)


@router.post("/login")
async def login(request: Request, ctx: Ctx) -> Response:
    """Sets the token cookie for read pages (beyond loopback). The token comes as a JSON body."""

    if ctx.token is None or not _same_origin(request):
        raise HTTPException(403, "no token is configured, or a cross-site request")
    try:
        given = (await request.json()).get("token")
    except Exception:  # noqa: BLE001
        given = None
    if not isinstance(given, str) or not _matches(given, ctx.token):
        raise HTTPException(403, "wrong API token")
    response = Response(status_code=204)
    response.set_cookie(COOKIE, given, httponly=True, samesite="strict", secure=request.url.scheme == "https")
    return response
