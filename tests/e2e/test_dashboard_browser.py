"""The dashboard in a real browser (Debian's chromium, headless, driven by Selenium through its
chromedriver) beside the real CPU vLLM and a real Prometheus: a new user opens the fleet page, runs
a diagnosis from it, sees the ranked checks, proves the top check with an experiment whose page
follows it block by block, and opens the weekly report offline. Screenshots go to
artifacts/screenshots/ (ignored by git) for CI to keep."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from advisor.localstack.deployment import write_deployment
from tests.e2e.conftest import settle
from tests.support.servers import ROOT, free_port, listener

pytestmark = pytest.mark.timeout(1200)

SHOTS = ROOT / "artifacts" / "screenshots"
TOKEN = "browser-test-token"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.fail("Debian's chromium and chromium-driver are missing: run scripts/setup.sh", pytrace=False)
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must not try to download a driver
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1300,1800"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def wait_for(condition, timeout: float, what: str, step: float = 0.5):
    from selenium.common.exceptions import StaleElementReferenceException

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = condition()
        except StaleElementReferenceException:  # the page swapped the element while it was read: read again
            value = None
        if value:
            return value
        time.sleep(step)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


def shot(driver, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SHOTS / f"{name}.png"))


def test_a_new_user_diagnoses_and_proves_a_check_from_the_browser(local_engine, local_prometheus, background,
                                                                     tmp_path, isolated_store):
    from selenium.webdriver.common.by import By

    prom = local_prometheus([local_engine.target])
    # Queue behind --max-num-seqs 2; short prompts keep every later request quick on a slow CPU.
    background.start(local_engine.url, requests=10_000, duration_s=20, concurrency=8, prompt_words=60, max_tokens=16)
    assert background.join()[0].errors == 0
    settle(prom)
    (tmp_path / "slo.yaml").write_text("ttft_p95: 0.05\n")  # tight: this CPU's queue breaks it
    spec = write_deployment(local_engine, tmp_path / "dep.yaml")
    candidate_port = yaml.safe_load(spec.read_text())["local"]["candidate_port"]
    stored = _prefill_store(yaml.safe_load(spec.read_text())["name"], local_engine.url)
    (tmp_path / "advisor.yaml").write_text(yaml.safe_dump({
        "deployments": [{"name": "local", "prom_url": prom.url, "slo": "slo.yaml", "deployment": "dep.yaml",
                         "window": "2m", "experiments": {"blocks": 2, "block_requests": 8, "readout": "ttft_p50",
                                                         "concurrency": 4, "fixed": True}}],
        "weekly_report": {"cron": "0 8 * * MON"}}))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "serve.log", "w")
    serve = subprocess.Popen([sys.executable, "-m", "advisor.cli", "serve", "--config", str(tmp_path / "advisor.yaml"),
                              "--port", str(port)], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                             env={**os.environ, "ADVISOR_API_TOKEN": TOKEN})
    driver = None
    try:
        if not _wait_answers(base, serve, 90):
            pytest.fail("advisor serve did not answer: " + (tmp_path / "serve.log").read_text()[-3000:])
        driver = browser()
        driver.get(base + "/")
        assert driver.find_element(By.CSS_SELECTOR, 'tr[data-deployment="local"]')
        assert "no diagnosis yet" in driver.find_element(By.ID, "fleet").text
        shot(driver, "1-fleet")

        # The store already holds an experiment (a real one, captured): its deployment lists it, and
        # its page shows it whole from the stored document, verdict, interval, charts and blocks.
        driver.get(base + "/deployments/local")
        driver.find_element(By.CSS_SELECTOR, f'#experiments a[href="/experiments/{stored}"]').click()
        wait_for(lambda: f"/experiments/{stored}" in driver.current_url, 30, "the stored experiment's page")
        body = driver.find_element(By.ID, "experiment-body")
        assert body.get_attribute("data-status") == "finished", body.text[:2000]
        assert "improved" in body.text and "0.0097" in body.text and "cannot be recomputed" not in body.text, \
            body.text[:3000]
        assert len(body.find_elements(By.CSS_SELECTOR, "svg.chart")) == 2, "forest plot and per-block chart"
        assert len(body.find_elements(By.CSS_SELECTOR, "table.blocks tr")) - 1 == 8
        shot(driver, "1b-stored-experiment")
        driver.get(base + "/")

        # Diagnose now: the token lives in this tab's sessionStorage, as the page's prompt would keep it.
        driver.execute_script("sessionStorage.setItem('advisorToken', arguments[0])", TOKEN)
        driver.find_element(By.CSS_SELECTOR, "button.run-diagnosis").click()
        wait_for(lambda: "/diagnoses/" in driver.current_url, 120, "the diagnosis page")
        checks = driver.find_elements(By.CSS_SELECTOR, "#checks tr")[1:]
        assert checks, driver.page_source[:2000]
        assert "max_num_seqs" in checks[0].text
        assert driver.find_elements(By.CSS_SELECTOR, "svg.chart"), "the evidence chart"
        shot(driver, "2-diagnosis")

        # Prove it: a confirmation that shows the one flag that changes, then the experiment.
        driver.find_element(By.CSS_SELECTOR, "button.prove").click()
        wait_for(lambda: driver.find_element(By.ID, "confirm").is_displayed(), 180, "the experiment's plan")
        changes = driver.find_element(By.ID, "changes").text.splitlines()
        assert changes == ["--max-num-seqs 2 -> 8"], changes
        assert driver.find_element(By.ID, "guardrails").text.strip()
        shot(driver, "3-confirm")
        driver.find_element(By.ID, "start").click()
        wait_for(lambda: "/experiments/" in driver.current_url, 240, "the experiment page")
        seen_blocks: set[int] = set()

        def ended():
            body = driver.find_element(By.ID, "experiment-body")
            seen_blocks.add(len(body.find_elements(By.CSS_SELECTOR, "table.blocks tr")) - 1)
            return body.get_attribute("data-status") != "running"

        wait_for(ended, 900, "the experiment to end (the page follows it without a reload)", step=2)
        shot(driver, "4-experiment")
        body = driver.find_element(By.ID, "experiment-body")
        assert body.get_attribute("data-status") == "finished", body.text[:2000]
        assert "restored and healthy" in body.text
        assert len(body.find_elements(By.CSS_SELECTOR, "svg.chart")) == 2, "forest plot and per-block chart"
        assert len(body.find_elements(By.CSS_SELECTOR, "table.blocks tr")) - 1 == 4
        assert "Server readouts per arm" in body.text and "requests_running_avg" in body.text, body.text[:3000]
        assert listener(candidate_port) is None, "the candidate was stopped"

        # The weekly report, downloaded and opened from disk: it needs nothing from the network.
        weekly = httpx.get(base + "/reports/weekly", timeout=120)
        assert weekly.status_code == 200
        path = tmp_path / "weekly.html"
        path.write_text(weekly.text)
        driver.get(path.as_uri())
        assert len(driver.find_elements(By.CSS_SELECTOR, "svg.chart")) == 3, "TTFT, TPOT and E2E by day"
        assert "SLO attainment" in driver.page_source
        shot(driver, "5-weekly")
    finally:
        if driver is not None:
            driver.quit()
        serve.terminate()
        serve.wait(timeout=360)
        log.close()
    assert serve.returncode in (0, 143), (tmp_path / "serve.log").read_text()[-3000:]


def _prefill_store(spec_name: str, target: str) -> int:
    """A real experiment's stored result (tests/fixtures/vllm-0.32.0-cpu/README.md says how it was
    captured) put in the test's store as `advisor experiment --save` leaves one; returns its id."""
    from advisor.experiments.result import ExperimentResult
    from advisor.store import open_store

    doc = json.loads((ROOT / "tests" / "fixtures" / "vllm-0.32.0-cpu" / "experiment-max-num-seqs-2-to-8.json").read_text())
    result = ExperimentResult.model_validate(doc)
    with open_store() as store:
        ident = store.start_experiment(result.id, spec_name, target, result.mechanism, result.value,
                                       {"lines": ["captured on the local CPU engine"]})
        store.finish_experiment(ident, result)
    return ident


def _wait_answers(base: str, proc: subprocess.Popen, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if _answers(base):
            return True
        time.sleep(0.5)
    return False


def _answers(base: str) -> bool:
    try:
        return httpx.get(base + "/api/deployments", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
