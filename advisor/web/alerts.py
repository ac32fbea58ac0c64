"""POST /api/alertmanager: Alertmanager's webhook (its `http_config.authorization` carries the
same Bearer token as every action). 202 for every notification it can read, with what it did:
Alertmanager retries anything else, for ever."""

from __future__ import annotations

import logging
import threading
from urllib.parse import quote

from fastapi import APIRouter, HTTPException, Request
from pydantic import ValidationError

from advisor import escape
from advisor.app.alerts_in import AmNotification
from advisor.app.diagnose import diagnose_watched
from advisor.diagnosis.model import Trigger
from advisor.web.context import Ctx
from advisor.web.responses import SafeJSON
from advisor.web.security import Actor

router = APIRouter(prefix="/api", tags=["alertmanager"], default_response_class=SafeJSON)
log = logging.getLogger("advisor.alertmanager")


def _diagnose(ctx, name: str, group: str, trigger: Trigger | None = None) -> None:
    w = ctx.config.get(name)
    try:
        saved = diagnose_watched(w, ctx.store, ctx.alerts_out, trigger)
        log.info("alertmanager: diagnosis %s of %s (group %s): %s", saved.saved_id, name, group[:200],
                 saved.diagnosis.summary)
    except Exception as e:  # noqa: BLE001 - a thread's failure goes to the log, the next alert tries again
        log.warning("alertmanager: the diagnosis of %s failed: %s", name, escape.one_line(str(e), 300))


@router.post("/alertmanager", status_code=202)
async def alertmanager(request: Request, ctx: Ctx, _: Actor) -> dict:
    """Starts a diagnosis of each deployment a firing alert names (its `deployment` label, or
    advisor.yaml's alertmanager.deployment_label), at most one per deployment per interval."""
    try:
        note = AmNotification.model_validate(await request.json())
    except ValueError as e:  # not JSON, or not Alertmanager's shape (ValidationError is a ValueError)
        first = e.errors()[0] if isinstance(e, ValidationError) and e.errors() else None
        where = ".".join(str(p) for p in first["loc"]) + ": " + first["msg"] if first else "not JSON"
        raise HTTPException(400, f"not an Alertmanager webhook notification (version 4): "
                                 f"{escape.one_line(where, 200)}") from None
    intake = ctx.alerts.receive(note, ctx.config)
    label = ctx.config.alertmanager.deployment_label
    for name in intake.started:
        names = sorted({a.labels.get("alertname", "?") for a in note.alerts
                        if a.status == "firing" and a.labels.get(label) == name})
        url = (f"{note.externalURL.rstrip('/')}/#/alerts?filter=" + quote(f'{{{label}="{name}"}}')
               if note.externalURL.startswith(("http://", "https://")) else None)
        trigger = Trigger(source="alertmanager", alerts=names, group_key=note.groupKey[:500], url=url)
        threading.Thread(target=_diagnose, args=(ctx, name, note.groupKey, trigger), name=f"alert-diagnosis-{name}",
                         daemon=True).start()
    return {"started": intake.started, "dropped": [{"deployment": d, "why": w} for d, w in intake.dropped],
            "unknown": [{"deployment": d, "why": w} for d, w in intake.unknown], "resolved": intake.resolved, "own": intake.own,
            "dropped_total": ctx.alerts.dropped_total}
