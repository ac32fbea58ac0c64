"""The rule base as a Prometheus rule file (`advisor rules export`): inputs checked, the rules
compiled per dialect (advisor.alerting.prometheus_rules), written as YAML."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from advisor.alerting import prometheus_rules as pr
from advisor.diagnosis import load_overrides, load_rules, load_slo
from advisor.errors import AdvisorError
from advisor.settings import get_settings
from probes.catalog import GPU_DIALECT, dialects

FORMATS = ("prometheus", "prometheus-operator", "grafana")


class ExportProblem(AdvisorError, ValueError):
    """The export was asked for something it cannot write."""


@dataclass
class ExportRequest:
    format: str = "prometheus"
    slo: Path | None = None
    rules_config: Path | None = None
    dialect: str = "auto"
    window_s: float = 300.0
    breach_for_s: float = 300.0
    warning_for_s: float = 900.0
    dashboard_url: str | None = None
    model: str | None = None
    name: str = "llm-advisor"  # the PrometheusRule object's name
    namespace: str | None = None
    labels: dict[str, str] = field(default_factory=dict)  # added to every alert: deployment=NAME


def export(req: ExportRequest) -> str:
    if req.format not in FORMATS:
        raise ExportProblem(f"unknown format {req.format!r}: one of {', '.join(FORMATS)}")
    if not req.window_s > 0 or req.breach_for_s < 0 or req.warning_for_s < 0:
        raise ExportProblem("the window must be positive and the for: durations not negative")
    for k in req.labels:
        if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", k) or k.startswith("__"):
            raise ExportProblem(f"not a Prometheus label name: {k!r}")
    settings = get_settings()
    slo = load_slo(req.slo or settings.slo_file).model_dump()
    overrides_file = req.rules_config or settings.rules_config
    rules = load_rules(overrides=load_overrides(overrides_file) if overrides_file else {})
    catalog = dialects()
    try:
        wanted = pr.engine_dialects_named(catalog, req.dialect)
    except KeyError:
        known = sorted(k for k in catalog if k != GPU_DIALECT)
        raise ExportProblem(f"unknown dialect {req.dialect!r}: one of auto, {', '.join(known)}") from None
    if req.format == "grafana" and len(wanted) != 1:
        raise ExportProblem("--format grafana draws one dialect's signals: give --dialect vllm (or sglang, ...)")
    compiled = [pr.compile_dialect(d, catalog.get(GPU_DIALECT), rules, slo, req.window_s, req.model) for d in wanted]
    if req.format == "grafana":
        from advisor.alerting.grafana import dashboard

        return json.dumps(dashboard(compiled[0], slo), indent=2) + "\n"
    groups = pr.groups(compiled, breach_for_s=req.breach_for_s, warning_for_s=req.warning_for_s,
                       dashboard_url=req.dashboard_url, labels=req.labels)
    doc: dict = {"groups": groups}
    if req.format == "prometheus-operator":
        meta = {"name": req.name, "labels": {"app.kubernetes.io/name": "llm-advisor"}}
        if req.namespace:
            meta["namespace"] = req.namespace
        doc = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule", "metadata": meta,
               "spec": {"groups": groups}}
    body = yaml.safe_dump(doc, sort_keys=False, width=120, allow_unicode=True)
    return pr.header(compiled, slo, req.window_s) + body
