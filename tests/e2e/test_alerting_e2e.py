"""The alerting loop on the local stack: the real CPU vLLM queues behind --max-num-seqs 2, the real
Prometheus evaluates the rules `advisor rules export` wrote and fires, the real Alertmanager calls
`advisor serve`, whose diagnosis is on the dashboard within a minute, and the diagnosis' findings
are back in Alertmanager with a link to it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import yaml

from advisor.app.rules_export import ExportRequest, export
from tests.support import alertmanager
from tests.support.alertmanager import answers, wait_for
from tests.support.servers import ROOT, free_port

TOKEN = "alerting-e2e-token"


def test_a_queue_fires_the_exported_rule_alertmanager_calls_the_advisor_and_the_finding_comes_back(
        local_engine, local_prometheus, background, tmp_path, isolated_store):
    slo = tmp_path / "slo.yaml"
    slo.write_text("ttft_p95: 0.05\n")  # tight: this CPU's queue breaks it, whatever the machine's speed
    rules = tmp_path / "llm-advisor.yaml"
    rules.write_text(export(ExportRequest(slo=slo, dialect="vllm", window_s=20, breach_for_s=0, warning_for_s=0,
                                          labels={"deployment": "local"},
                                          dashboard_url="http://advisor.example:8080")))
    port, am_port = free_port(), free_port()
    am_url = f"http://127.0.0.1:{am_port}"
    am_log, serve_log = tmp_path / "am.log", tmp_path / "serve.log"
    am = alertmanager.start(tmp_path, am_port, f"http://127.0.0.1:{port}/api/alertmanager", TOKEN,
                            group_interval="5s", repeat_interval="1h")
    prom = local_prometheus([local_engine.target], rule_files=[rules], alertmanager=f"127.0.0.1:{am_port}")
    (tmp_path / "advisor.yaml").write_text(yaml.safe_dump({
        "deployments": [{"name": "local", "prom_url": prom.url, "window": "20s", "slo": str(slo)}],
        "alertmanager": {"url": am_url, "dashboard_url": f"http://127.0.0.1:{port}"}}))
    serve = subprocess.Popen([sys.executable, "-m", "advisor.cli", "serve", "--config", str(tmp_path / "advisor.yaml"),
                              "--port", str(port)], cwd=ROOT, env={**os.environ, "ADVISOR_API_TOKEN": TOKEN},
                             stdout=serve_log.open("w"), stderr=subprocess.STDOUT)
    logs = (serve_log, am_log, prom.log_path)
    try:
        wait_for(lambda: answers(f"http://127.0.0.1:{port}/api/deployments"), 90, "advisor serve", logs)
        wait_for(lambda: answers(f"{am_url}/-/ready"), 60, "alertmanager", logs)
        background.start(local_engine.url, requests=10_000, duration_s=30, concurrency=8, prompt_words=60,
                         max_tokens=32)

        def firing() -> list:
            r = httpx.get(f"{prom.url}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
            return [a for a in r if a["state"] == "firing" and a["labels"].get("deployment") == "local"]

        fired = wait_for(firing, 60, "an exported rule firing in Prometheus", logs)
        t_fired = time.monotonic()
        assert {a["labels"]["rule"] for a in fired} & {"ADV001", "ADV003"}, fired

        def diagnosed() -> list:
            return httpx.get(f"http://127.0.0.1:{port}/api/deployments/local/diagnoses", timeout=5).json()

        [d] = wait_for(diagnosed, 60, "the alert's diagnosis on the dashboard", logs)
        assert time.monotonic() - t_fired < 60
        page = httpx.get(f"http://127.0.0.1:{port}/diagnoses/{d['id']}", timeout=30)
        assert page.status_code == 200 and not d["healthy"], d

        found = wait_for(lambda: alertmanager.query(am_url, "alertname=LLMAdvisorFinding", "deployment=local"), 60,
                         "the advisor's finding back in Alertmanager", logs)
        assert all(a["annotations"]["diagnosis"] == f"http://127.0.0.1:{port}/diagnoses/{d['id']}" for a in found)
        print(f"\nfired {sorted(a['labels']['alertname'] for a in fired)}; diagnosis {d['id']}: {d['summary'] if 'summary' in d else d['top_severity']}; "
              f"back in Alertmanager: {sorted(a['labels']['rule'] for a in found)}")
    finally:
        background.join()
        for p in (serve, am):
            p.terminate()
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
