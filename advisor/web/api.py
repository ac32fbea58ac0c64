"""The JSON API. Paths scripts can rely on: /api/deployments, /api/deployments/{name}/diagnoses
(GET newest first; POST runs one now: 202 with its id), /api/deployments/{name}/experiments (GET;
POST starts one: 202 with its id), /api/deployments/{name}/capacity (GET newest first), /api/diagnoses/{id}, /api/experiments/{id}; /openapi.json."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from fastapi import APIRouter, HTTPException
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field

from advisor.app.watched import ActionError, CheckRef, spec_name
from advisor.reports import views
from advisor.reports.documents import stored_experiment_view
from advisor.store import StoreError
from advisor.web.context import MAX_ID, Ctx, StoreId, Watched
from advisor.web.responses import SafeJSON
from advisor.web.security import Actor, Reader
from advisor.app.diagnose import diagnose_watched

router = APIRouter(prefix="/api", tags=["api"], default_response_class=SafeJSON)


def _summary(s) -> dict:
    return {"id": s.id, "created_at": s.created_at.isoformat(), "deployment": s.deployment, "target": s.target,
            "healthy": s.healthy, "top_severity": s.top_severity, "findings": s.findings_count,
            "ttft_p95": s.ttft_p95, "url": f"/diagnoses/{s.id}"}


def _experiment(e) -> dict:
    return {"id": e.id, "key": e.key, "created_at": e.created_at.isoformat(), "deployment": e.deployment,
            "mechanism": e.mechanism, "value": e.value, "status": e.status, "verdict": e.verdict,
            "primary_metric": e.primary_metric, "ratio": e.ratio, "baseline_restored": e.baseline_restored,
            "diagnosis_id": e.diagnosis_id, "url": f"/experiments/{e.id}"}


def _spec_of(w) -> str | None:
    """The name experiments and capacity answers are stored under: the deployment spec's."""
    try:
        return spec_name(w)
    except Exception:  # noqa: BLE001  (no spec, or an unreadable one: then it has neither)
        return None


def _experiments_of(ctx, w) -> list:
    name = _spec_of(w)
    return ctx.store.list_experiments(deployment=name) if name else []


def _capacity_of(ctx, w, limit: int = 50) -> list:
    name = _spec_of(w)
    return ctx.store.list_capacity(deployment=name, limit=limit) if name else []


@router.get("/deployments")
def list_deployments(ctx: Ctx, _: Reader) -> list[dict]:
    """Every deployment advisor.yaml names, with its latest diagnosis."""
    rows = []
    for w in ctx.config.deployments:
        last = ctx.store.list_diagnoses(deployment=w.name, limit=1)
        rows.append({"name": w.name, "prom_url": w.prom_url, "diagnose_every": w.diagnose_every,
                     "experiments": w.deployment is not None,
                     "last_diagnosis": _summary(last[0]) if last else None})
    return rows


@router.get("/deployments/{name}/diagnoses")
def list_diagnoses(w: Watched, ctx: Ctx, _: Reader, limit: int = 50) -> list[dict]:
    """Newest first, each with its id."""
    return [_summary(s) for s in ctx.store.list_diagnoses(deployment=w.name, limit=max(1, min(limit, 500)))]


@router.post("/deployments/{name}/diagnoses", status_code=202)
async def run_diagnosis(w: Watched, ctx: Ctx, _: Actor) -> dict:
    """Runs a diagnosis of the deployment now (its Prometheus, its SLOs) and saves it."""

    saved = await run_in_threadpool(lambda: diagnose_watched(w, ctx.store, ctx.alerts_out))
    d, ident = saved.diagnosis, saved.saved_id
    return {"id": ident, "url": f"/diagnoses/{ident}", "healthy": d.healthy, "summary": d.summary,
            "top_severity": d.top_severity, "findings": len(d.findings), "checks": [c.title for c in d.checks]}


@router.get("/deployments/{name}/capacity")
def list_capacity(w: Watched, ctx: Ctx, _: Reader, limit: int = 50) -> list[dict]:
    """The deployment's capacity answers, newest first (the whole answer, its trials and chart, at its url)."""
    return [{"id": c.id, "created_at": c.created_at.isoformat(), "deployment": c.deployment, "target": c.target,
             "model": c.model, "workload": c.workload, "status": c.status, "estimate": c.estimate, "low": c.low,
             "high": c.high, "level": c.level, "binding": c.binding, "requests": c.requests, "seconds": c.seconds,
             "url": f"/capacity/{c.id}"}
            for c in _capacity_of(ctx, w, max(1, min(limit, 500)))]


@router.get("/deployments/{name}/experiments")
def list_experiments(w: Watched, ctx: Ctx, _: Reader) -> list[dict]:
    return [_experiment(e) for e in _experiments_of(ctx, w)]


class ExperimentRequest(BaseModel):
    """Either a check of a saved diagnosis (diagnosis_id and rank), or a mechanism (and a value)."""

    diagnosis_id: int | None = Field(default=None, ge=1, le=MAX_ID)  # looked up in the store: its range
    rank: int | None = Field(default=None, ge=1)
    mechanism: str | None = Field(default=None, max_length=64, pattern=r"^[a-z_]+$")
    value: str | None = Field(default=None, max_length=200)


def _check_ref(ctx, w, body: ExperimentRequest) -> CheckRef:
    if body.diagnosis_id is not None:
        if body.rank is None:
            raise HTTPException(422, "rank: the check's rank is needed with diagnosis_id")
        summary = _or_404(lambda: ctx.store.get_diagnosis_summary(body.diagnosis_id))
        if summary.deployment != w.name:
            raise HTTPException(404, f"diagnosis {body.diagnosis_id} is not of {w.name}")
        d = ctx.store.get_diagnosis(body.diagnosis_id)
        check = next((c for c in d.checks if c.rank == body.rank), None)
        if check is None:
            raise HTTPException(404, f"diagnosis {body.diagnosis_id} has no check #{body.rank}")
        if check.held_back or check.already:
            raise HTTPException(409, f"check #{body.rank} is {'held back' if check.held_back else check.already}")
        return CheckRef(check.mechanism, check.direction, check.readout, body.value)
    if body.mechanism is None:
        raise HTTPException(422, "give diagnosis_id and rank, or mechanism")
    return CheckRef(body.mechanism, None, None, body.value)


@router.post("/deployments/{name}/experiments/preview")
async def preview_experiment(w: Watched, ctx: Ctx, _: Actor, body: ExperimentRequest) -> dict:
    """The design it would run, started nothing: the flag that changes, the guardrails, the plan."""
    ref = _check_ref(ctx, w, body)
    return await run_in_threadpool(ctx.runs.preview, w, ref)


@router.post("/deployments/{name}/experiments", status_code=202)
async def start_experiment(w: Watched, ctx: Ctx, _: Actor, body: ExperimentRequest) -> dict:
    """Starts the experiment; answers once it is recorded, with its id. Follow it at its url."""
    ref = _check_ref(ctx, w, body)
    ident = await run_in_threadpool(ctx.runs.start, w, ref, body.diagnosis_id)
    return {"id": ident, "url": f"/experiments/{ident}"}


def _epoch_ms(t: datetime) -> int:
    """A stored time (naive ones are UTC) as milliseconds since the epoch."""
    return int(t.replace(tzinfo=t.tzinfo or timezone.utc).timestamp() * 1000)


@router.get("/deployments/{name}/annotations")
def annotations(w: Watched, ctx: Ctx, _: Reader, limit: int = 200) -> list[dict]:
    """The deployment's diagnoses and experiments as Grafana annotations: time (ms since the epoch),
    title, text, tags, the shape the JSON and Infinity data sources read (deploy/grafana/)."""
    n = max(1, min(limit, 1000))
    rows = []
    for s in ctx.store.list_diagnoses(deployment=w.name, limit=n):
        rows.append({"time": _epoch_ms(s.created_at),
                     "title": f"diagnosis {s.id}: {'healthy' if s.healthy else s.top_severity}",
                     "text": f"{s.findings_count} finding(s); /diagnoses/{s.id}",
                     "tags": ["llm-advisor", "diagnosis", "healthy" if s.healthy else (s.top_severity or "finding")]})
    for e in _experiments_of(ctx, w)[:n]:
        rows.append({"time": _epoch_ms(e.created_at),
                     "title": f"experiment {e.id}: {e.mechanism} -> {e.value}: {e.verdict or e.status}",
                     "text": (f"{e.primary_metric} ratio {e.ratio:.3g}; " if e.ratio is not None else "")
                             + f"/experiments/{e.id}",
                     "tags": ["llm-advisor", "experiment", e.verdict or e.status]})
    return sorted(rows, key=lambda r: r["time"])


@router.get("/diagnoses/{diagnosis_id}")
def get_diagnosis(diagnosis_id: StoreId, ctx: Ctx, _: Reader) -> SafeJSON:
    d = _or_404(lambda: ctx.store.get_diagnosis(diagnosis_id))
    summary = ctx.store.get_diagnosis_summary(diagnosis_id)
    _allowed(ctx, summary.deployment)
    return SafeJSON({"id": diagnosis_id, "deployment": summary.deployment,
                         "healthy": d.healthy, "summary": d.summary, "top_severity": d.top_severity, **json.loads(d.model_dump_json())})


@router.get("/experiments/{experiment_id}")
def get_experiment(experiment_id: StoreId, ctx: Ctx, _: Reader) -> SafeJSON:
    view = _or_404(lambda: stored_experiment_view(ctx.store, experiment_id, charts_on=False))
    watched = watched_of_experiment(ctx, view.deployment)
    return SafeJSON({**json.loads(views.as_json(view)), "watched": watched})


def watched_of_experiment(ctx, spec: str | None, what: str = "an experiment") -> str:
    """The advisor.yaml name whose deployment spec the experiment (or capacity search) ran on; 404
    when none is: only what advisor.yaml names is shown (a shared store may hold other deployments')."""
    for w in ctx.config.deployments:
        if w.deployment is not None and spec is not None and _spec_of(w) == spec:
            return w.name
    raise HTTPException(404, f"not {what} of a deployment in advisor.yaml")


def _or_404(read):
    try:
        return read()
    except StoreError as e:
        if str(e).startswith("no "):
            raise HTTPException(404, str(e).split(" in the store")[0]) from None
        raise


def _allowed(ctx, deployment: str | None) -> None:
    """Only what advisor.yaml names is shown (a shared store may hold other deployments' diagnoses)."""
    if deployment is None or ctx.config.get(deployment) is None:
        raise HTTPException(404, "not a diagnosis of a deployment in advisor.yaml")


__all__ = ["ActionError", "router"]
