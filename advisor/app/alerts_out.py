"""Alertmanager out: a watched deployment's findings posted to Alertmanager's API as alerts, so they
reach the receivers a team already has (its routes, silences and inhibitions), not a notifier
written here.

One alert per finding, named LLMAdvisorFinding with the deployment, rule, layer and severity as
labels, and the diagnosis' page as its generatorURL. Each carries an end (endsAt, `ttl` ahead):
a later diagnosis that finds it again renews it; one that does not (a healthy one) ends it at once;
if the advisor stops diagnosing, Alertmanager resolves it when the end passes. Posting never fails
a diagnosis: a refusal or an unreachable Alertmanager is one log line.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta, timezone

from advisor import escape, net
from advisor.diagnosis import Diagnosis
from advisor.app.alerts_in import OWN_SOURCE
from advisor.fleet.config import FleetConfig, WatchedDeployment
from probes.http import HttpConfig, client, request, split_userinfo

log = logging.getLogger("advisor.alertmanager")
ALERTNAME = "LLMAdvisorFinding"


def _iso(t: datetime) -> str:
    return t.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def alerts_out_for(config: FleetConfig) -> AlertsOut | None:
    """The poster advisor.yaml asks for: one where alertmanager.url is set, else None."""
    return AlertsOut(config) if config.alertmanager.url else None


class AlertsOut:
    def __init__(self, config: FleetConfig):
        am = config.alertmanager
        url, auth = split_userinfo(am.url)
        self.url = url.rstrip("/")
        self.dashboard_url = am.dashboard_url.rstrip("/") if am.dashboard_url else None
        self.ttl_s = am.ttl_s
        self._cfg = HttpConfig(verify=net.tls_verify(), ca_bundle=net.ca_bundle(), auth=auth, timeout=10.0)
        self._lock = threading.Lock()
        self._posted: dict[str, dict[str, dict]] = {}  # deployment -> rule id -> the alert last posted

    def alerts_for(self, w: WatchedDeployment, d: Diagnosis, diagnosis_id: int | None,
                   now: datetime | None = None) -> list[dict]:
        """What to post after this diagnosis: its findings (renewed), and the ones posted before that
        it no longer finds, ended now."""
        now = now or datetime.now(timezone.utc)
        link = f"{self.dashboard_url}/diagnoses/{diagnosis_id}" if self.dashboard_url and diagnosis_id else None
        fresh = {}
        for f in d.findings:
            top = min((c for c in d.checks if c.rule_id == f.rule_id), key=lambda c: c.rank, default=None)
            ann = {"summary": f"{f.rule_id} {f.symptom} ({f.severity})",
                   "evidence": "; ".join(e.text for e in f.evidence)[:2000]}
            if top is not None:
                ann["first_check"] = f"{top.title}: {top.mechanism} {top.direction or ''}".strip()
            if link:
                ann["diagnosis"] = link
            alert = {"labels": {"alertname": ALERTNAME, "deployment": w.name, "rule": f.rule_id, "layer": f.layer,
                                "severity": f.severity, "source": OWN_SOURCE},
                     "annotations": {k: escape.one_line(v, 2000) for k, v in ann.items()},
                     "startsAt": _iso(now), "endsAt": _iso(now + timedelta(seconds=self.ttl_s))}
            if link:
                alert["generatorURL"] = link
            fresh[f.rule_id] = alert
        with self._lock:
            before = self._posted.get(w.name, {})
            ended = [{**a, "endsAt": _iso(now)} for rid, a in before.items() if rid not in fresh]
            self._posted[w.name] = fresh
        return [*fresh.values(), *ended]

    def post(self, w: WatchedDeployment, d: Diagnosis, diagnosis_id: int | None) -> None:
        alerts = self.alerts_for(w, d, diagnosis_id)
        if not alerts:
            return
        try:
            r = request(client(self._cfg), "POST", f"{self.url}/api/v2/alerts", what="Alertmanager", json=alerts)
        except Exception as e:  # noqa: BLE001 - one line in the log; the diagnosis stands
            log.warning("alertmanager: could not post %d alert(s) for %s: %s", len(alerts), w.name,
                        escape.one_line(str(e), 300))
            return
        if r.status_code >= 300:
            log.warning("alertmanager: %s refused %d alert(s) for %s: %d %s", self.url, len(alerts), w.name,
                        r.status_code, escape.one_line(r.text, 300))
        else:
            log.info("alertmanager: posted %d alert(s) for %s", len(alerts), w.name)
