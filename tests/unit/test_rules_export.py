"""`advisor rules export`: the rule base compiled to Prometheus rules (advisor/alerting). promtool
checks the files and replays every scenario through them in tests/integration/test_scenarios.py."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from typer.testing import CliRunner

from advisor.alerting.prometheus_rules import _Known, compile_cond
from advisor.app.rules_export import ExportRequest, export
from advisor.cli import app
from advisor.diagnosis import load_rules
from advisor.diagnosis.rules import _cond

runner = CliRunner()
SIGNALS = {"ttft_p95", "tpot_p95", "queue_time_mean", "ttft_mean"}
SLO = {"ttft_p95": 1.0, "tpot_p95": None}


def comp(raw):
    params = {"headroom": 0.8}
    return compile_cond(_cond(raw, "test", params, set(SLO)), "vllm", SIGNALS, SLO, params)


def test_a_condition_compiles_with_the_advisor_s_three_values():
    assert comp({"value": {"signal": "ttft_p95"}, "op": ">", "than": {"slo": "ttft_p95"}}) == \
        "advisor:vllm:ttft_p95 > 1.0"
    # A number on the left: the signal's side keeps the value an alert shows.
    assert comp({"value": {"param": "headroom"}, "op": "<", "than": {"signal": "ttft_p95"}}) == \
        "advisor:vllm:ttft_p95 > 0.8"
    # An SLO that is not set leaves the comparison undecided: an `all` with it never fires ...
    undecided = {"value": {"signal": "tpot_p95"}, "op": "<=", "than": {"slo": "tpot_p95"}}
    held = {"value": {"signal": "ttft_p95"}, "op": ">", "than": {"slo": "ttft_p95"}}
    assert comp({"all": [held, undecided]}) == _Known(None)
    # ... and an `any` is left to its other branches, as the advisor's any is.
    assert comp({"any": [held, undecided]}) == "(advisor:vllm:ttft_p95 > 1.0)"
    # A signal the dialect does not map is missing, not an error.
    assert comp({"any": [held, {"value": {"signal": "spec_acceptance_rate"}, "op": "<", "than": 0.5}]}) == \
        "(advisor:vllm:ttft_p95 > 1.0)"
    ratio = {"value": {"ratio": [{"signal": "queue_time_mean"}, {"signal": "ttft_mean"}]}, "op": ">=", "than": 0.5}
    assert comp(ratio) == "(advisor:vllm:queue_time_mean / advisor:vllm:ttft_mean) >= 0.5"


def test_every_rule_is_exported_or_named_with_the_reason_it_cannot_be():
    """A rule added to rules/ that PromQL cannot express fails here until it is listed, with its reason."""
    text = export(ExportRequest(dialect="vllm"))
    doc = yaml.safe_load(text)
    alerts = {r["alert"] for g in doc["groups"] for r in g["rules"] if "alert" in r}
    breaches = {r.id for r in load_rules() if r.enabled}
    not_exported = breaches - alerts
    assert not_exported == {"ADV005", "ADV008", "ADV010"}, not_exported  # a host fact, an engine flag, a spread
    for rid, why in (("ADV005", "fact:gpu_count"), ("ADV008", "config:enable_prefix_caching"),
                     ("ADV010", "fact:replica_count")):
        assert f"#   {rid} breach (vllm): PromQL alone cannot read {why}" in text, text[:3000]
    warned = {r.id + "Warning" for r in load_rules() if r.warning_when is not None}
    assert warned <= alerts
    for g in doc["groups"]:
        for r in g["rules"]:
            if "alert" in r:
                assert set(r["labels"]) >= {"severity", "rule", "layer"} and "{{ $value" in r["annotations"]["summary"]
                assert r["annotations"]["first_check"]


def test_promtool_accepts_every_dialect_and_the_operator_object(tmp_path):
    r = runner.invoke(app, ["rules", "export", "--out", str(tmp_path / "all.yaml"), "--dashboard-url",
                            "http://advisor.local:8080/"])
    assert r.exit_code == 0, r.output
    check = subprocess.run(["promtool", "check", "rules", str(tmp_path / "all.yaml")], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    doc = yaml.safe_load((tmp_path / "all.yaml").read_text())
    assert {g["name"] for g in doc["groups"]} == {f"llm-advisor-{d}" for d in
                                                   ("vllm", "sglang", "tgi", "llamacpp", "trtllm", "triton")}
    urls = {r["annotations"]["runbook_url"] for g in doc["groups"] for r in g["rules"] if "alert" in r}
    assert "http://advisor.local:8080/rules/ADV001" in urls
    op = runner.invoke(app, ["rules", "export", "--format", "prometheus-operator", "--namespace", "monitoring",
                             "--dialect", "sglang"])
    obj = yaml.safe_load(op.stdout)
    assert (obj["kind"], obj["apiVersion"], obj["metadata"]["namespace"]) == \
        ("PrometheusRule", "monitoring.coreos.com/v1", "monitoring")
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({"groups": obj["spec"]["groups"]}))
    check = subprocess.run(["promtool", "check", "rules", str(tmp_path / "spec.yaml")], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_slo_file_sets_the_thresholds(tmp_path):
    slo = tmp_path / "slo.yaml"
    slo.write_text("ttft_p95: 0.25\n")
    doc = yaml.safe_load(export(ExportRequest(dialect="vllm", slo=slo)))
    [adv001] = [r for g in doc["groups"] for r in g["rules"] if r.get("alert") == "ADV001"]
    assert "advisor:vllm:ttft_p95 > 0.25" in adv001["expr"]


@pytest.mark.parametrize("args, said", [
    (["--dialect", "vllm-cpu"], "unknown dialect 'vllm-cpu': one of auto, llamacpp"),
    (["--format", "json"], "unknown format 'json'"),
    (["--window", "-5m"], "not a duration"),
    (["--slo", "/nonexistent/slo.yaml"], "/nonexistent/slo.yaml"),
])
def test_bad_input_is_one_line_and_exit_2(args, said):
    r = runner.invoke(app, ["rules", "export", *args])
    assert r.exit_code == 2 and said in r.output and "Traceback" not in r.output, r.output


def test_the_grafana_dashboard_in_deploy_is_the_export_s_and_a_valid_dashboard_model():
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    shipped = json.loads((root / "deploy" / "grafana" / "llm-advisor-vllm.json").read_text())
    assert shipped == json.loads(export(ExportRequest(format="grafana", dialect="vllm"))), \
        "deploy/grafana is stale: advisor rules export --format grafana --dialect vllm -o deploy/grafana/llm-advisor-vllm.json"
    assert shipped["schemaVersion"] >= 36 and shipped["uid"] == "llm-advisor-vllm"
    ids = [p["id"] for p in shipped["panels"]]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) for i in ids)
    records = yaml.safe_load(export(ExportRequest(dialect="vllm")))["groups"][0]["rules"]
    exprs = {r["expr"] for r in records if "record" in r}
    assert {p["targets"][0]["expr"] for p in shipped["panels"]} == exprs, "every panel's query is a recorded one"
    slo_panels = {p["title"] for p in shipped["panels"] if "thresholds" in p["fieldConfig"]["defaults"]}
    assert {"ttft_p95 (SLO 1)", "tpot_p95 (SLO 0.1)", "e2e_p99 (SLO 30)", "error_rate (SLO 0.01)"} <= slo_panels
    assert any(a.get("target", {}).get("url") == "/api/deployments/${deployment}/annotations"
               for a in shipped["annotations"]["list"])
