"""Prometheus going down in the middle of a diagnosis: exit 2, one clear line, and nothing written
to the store. A counting proxy in front of a real Prometheus stops that Prometheus after a few
queries have gone through."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from typer.testing import CliRunner

from advisor.cli import app
from advisor.localstack.prometheus import backfill
from advisor.store import open_store

pytestmark = pytest.mark.integration


def scrape_history(end: float) -> str:
    """Two minutes of a busy, queueing vLLM (synthetic, clearly not a capture) for backfill."""
    lines = ["# TYPE vllm:num_requests_waiting gauge", "# TYPE vllm:num_requests_running gauge"]
    samples = []
    for i in range(9):
        t = end - 120 + i * 15
        samples.append((t, f'vllm:num_requests_waiting{{engine="0",model_name="m",instance="a"}} 6 {t:.0f}'))
    lines += [s for _, s in samples]
    lines += [f'vllm:num_requests_running{{engine="0",model_name="m",instance="a"}} 2 {end - 120 + i * 15:.0f}' for i in range(9)]
    return "\n".join(lines) + "\n# EOF\n"


class KillAfter:
    def __init__(self, prom, after: int):
        self.prom, self.after, self.seen = prom, after, 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                outer.seen += 1
                if outer.seen == outer.after:
                    outer.prom.stop()
                try:
                    r = httpx.get(outer.prom.url + self.path, timeout=5)
                    body, code = r.content, r.status_code
                except httpx.HTTPError:
                    body, code = b"upstream down", 502
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server.server_address[1]}"


def test_prometheus_down_mid_run_exits_2_and_saves_nothing(tmp_path, local_prometheus, monkeypatch):
    import time

    data = tmp_path / "prom"
    now = time.time()
    backfill(scrape_history(now - 600), data)
    prom = local_prometheus([], data_dir=data)
    proxy = KillAfter(prom, after=2)  # the probe asks few, large queries: stop Prometheus after the first
    db = f"sqlite:///{tmp_path / 'advisor.db'}"
    monkeypatch.setenv("ADVISOR_DB_URL", db)
    from advisor.settings import get_settings
    get_settings.cache_clear()
    try:
        r = CliRunner().invoke(app, ["diagnose", "--prom-url", proxy.url, "--at", f"{now - 600:.0f}", "--save"])
    finally:
        proxy.server.shutdown()
        get_settings.cache_clear()
    assert r.exit_code == 2, r.output
    assert "error:" in r.output and "Traceback" not in r.output
    assert proxy.seen >= 2
    with open_store(db) as store:
        assert store.list_diagnoses() == []


def test_prometheus_up_saves_the_diagnosis(tmp_path, local_prometheus, monkeypatch):
    import time

    data = tmp_path / "prom"
    now = time.time()
    backfill(scrape_history(now - 600), data)
    prom = local_prometheus([], data_dir=data)
    db = f"sqlite:///{tmp_path / 'advisor.db'}"
    monkeypatch.setenv("ADVISOR_DB_URL", db)
    from advisor.settings import get_settings
    get_settings.cache_clear()
    try:
        r = CliRunner().invoke(app, ["diagnose", "--prom-url", prom.url, "--at", f"{now - 600:.0f}", "--save"])
    finally:
        get_settings.cache_clear()
    assert r.exit_code in (0, 1), r.output
    with open_store(db) as store:
        rows = store.list_diagnoses()
        assert len(rows) == 1 and rows[0].target == prom.url
