"""A Grafana dashboard of the signals the rules read, one dialect's: every panel's query is the
expression the rule export records (advisor.alerting.prometheus_rules), SLO lines where a signal
has an SLO, and the advisor's diagnoses and experiments as annotations read from its API
(GET /api/deployments/{name}/annotations) through the Infinity data source."""

from __future__ import annotations

from advisor.alerting.prometheus_rules import DialectRules
from probes.catalog import signal_unit

SCHEMA_VERSION = 39
# Grafana's unit ids for ours; a unit it has no id for is shown as a plain number.
UNITS = {"s": "s", "ratio": "percentunit", "req/s": "reqps", "tokens/s": "short", "tokens": "short",
         "requests": "short", "%": "percent", "W": "watt", "B/s": "Bps", "MiB": "mbytes"}
INFINITY = "yesoreyeram-infinity-datasource"


def dashboard(compiled: DialectRules, slo: dict) -> dict:
    dialect = compiled.dialect
    panels = []
    for i, (record, expr) in enumerate(compiled.records.items()):
        signal = record.split(":", 2)[2]
        unit = signal_unit(signal)
        field = {"unit": UNITS.get(unit, "short"), "custom": {"drawStyle": "line", "lineWidth": 1}}
        if slo.get(signal) is not None:
            field["thresholds"] = {"mode": "absolute", "steps": [{"color": "green", "value": None},
                                                                 {"color": "red", "value": slo[signal]}]}
            field["custom"]["thresholdsStyle"] = {"mode": "line+area"}
        panels.append({
            "id": i + 1, "type": "timeseries", "title": f"{signal} (SLO {slo[signal]:g})" if slo.get(signal)
            is not None else signal,
            "description": f"{record}: the expression `advisor rules export --dialect {dialect}` records",
            "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "targets": [{"refId": "A", "expr": expr, "legendFormat": signal,
                         "datasource": {"type": "prometheus", "uid": "${datasource}"}}],
            "fieldConfig": {"defaults": field, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "single"}},
        })
    return {
        "uid": f"llm-advisor-{dialect}", "title": f"LLM serving advisor: {dialect} signals",
        "tags": ["llm-advisor", dialect], "schemaVersion": SCHEMA_VERSION, "version": 1, "editable": True,
        "time": {"from": "now-6h", "to": "now"}, "refresh": "1m", "timezone": "utc",
        "templating": {"list": [
            {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus"},
            {"name": "advisor", "label": "Advisor API (Infinity)", "type": "datasource", "query": INFINITY},
            {"name": "deployment", "label": "Deployment (advisor.yaml)", "type": "textbox", "query": "local"},
        ]},
        "annotations": {"list": [
            {"builtIn": 1, "name": "Annotations & Alerts", "type": "dashboard", "enable": True,
             "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "iconColor": "rgba(0, 211, 255, 1)"},
            {"name": "advisor diagnoses and experiments", "enable": True, "iconColor": "orange",
             "datasource": {"type": INFINITY, "uid": "${advisor}"},
             "target": {"type": "json", "source": "url", "format": "table", "parser": "backend",
                        "url": "/api/deployments/${deployment}/annotations",
                        "columns": [{"selector": "time", "text": "time", "type": "timestamp_epoch"},
                                    {"selector": "title", "text": "title", "type": "string"},
                                    {"selector": "text", "text": "text", "type": "string"},
                                    {"selector": "tags", "text": "tags", "type": "string"}]}},
        ]},
        "panels": panels,
    }
