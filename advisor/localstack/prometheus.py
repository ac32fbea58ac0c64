"""Start and stop a real Prometheus server (Debian's 2.42) for demos and integration tests."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

import yaml

from advisor import child_env, children
from advisor.engine_process import log_tail
from advisor.errors import AdvisorError
from advisor.localstack import paths
from probes.prometheus import PrometheusClient

HOST = "127.0.0.1"
SETUP_HINT = "run scripts/setup.sh (it installs Debian's prometheus package)"

# Servers still running when the interpreter exits are stopped then, so none outlives its run.
_live: set["LocalPrometheus"] = set()


@atexit.register
def _stop_leftovers() -> None:
    for prom in list(_live):
        prom.stop()


class PrometheusError(AdvisorError, RuntimeError):
    """Prometheus or promtool is missing, failed, or never became ready."""


def _binary(name: str) -> str:
    found = shutil.which(name)
    if not found:
        raise PrometheusError(f"{name} not found on PATH: {SETUP_HINT}")
    return found


def backfill(openmetrics_text: str, data_dir: Path | str) -> None:
    """Write OpenMetrics samples as TSDB blocks into data_dir, before a Prometheus starts on it.

    For what a CPU engine cannot show live: GPU series, several replicas, days of history.
    The text must end with "# EOF"; timestamps are seconds.
    """
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".om", delete=False) as f:
        f.write(openmetrics_text if openmetrics_text.endswith("\n") else openmetrics_text + "\n")
    try:
        done = subprocess.run(
            [_binary("promtool"), "tsdb", "create-blocks-from", "openmetrics", f.name, str(data_dir)],
            capture_output=True, text=True, timeout=120, env=child_env.for_child(),
        )
    finally:
        os.unlink(f.name)
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().replace("\n", " | ")
        raise PrometheusError(f"promtool could not backfill {data_dir}: {detail}")


class LocalPrometheus:
    """A Prometheus scraping the given host:port targets, bound to 127.0.0.1 only."""

    def __init__(
        self,
        targets: Sequence[str],
        scrape_interval: str = "2s",
        data_dir: Path | str | None = None,
        port: int | None = None,
        job: str = "vllm",
        rule_files: Sequence[Path | str] = (),
        alertmanager: str | None = None,
    ) -> None:
        """rule_files: evaluated every scrape interval; alertmanager: host:port its alerts go to."""
        self.targets = list(targets)
        self.rule_files = [str(p) for p in rule_files]
        self.alertmanager = alertmanager
        self.scrape_interval = scrape_interval
        self.port = port or paths.free_port()
        self.job = job
        self._tmp = tempfile.TemporaryDirectory(prefix="advisor-prom-")
        self.data_dir = Path(data_dir) if data_dir else Path(self._tmp.name) / "data"
        self.config_path = Path(self._tmp.name) / "prometheus.yml"
        self.log_path = Path(self._tmp.name) / "prometheus.log"
        self.proc: subprocess.Popen | None = None
        self.ready_after_s: float | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def config(self) -> dict:
        cfg: dict = {
            "global": {"scrape_interval": self.scrape_interval, "evaluation_interval": self.scrape_interval},
            "scrape_configs": [{"job_name": self.job, "static_configs": [{"targets": self.targets}]}],
        }
        if self.rule_files:
            cfg["rule_files"] = self.rule_files
        if self.alertmanager:
            cfg["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [self.alertmanager]}]}]}
        return cfg

    def start(self, timeout: float = 60) -> "LocalPrometheus":
        if self.proc is not None:
            raise PrometheusError("prometheus already started")
        binary = _binary("prometheus")
        self.config_path.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [
            binary,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.data_dir}",
            f"--web.listen-address={HOST}:{self.port}",
            # Backfilled history may reach back days; the default 15d would drop it.
            "--storage.tsdb.retention.time=30d",
        ]
        started = time.monotonic()
        self.proc = children.spawn(cmd, self.log_path, env=child_env.for_child())
        _live.add(self)
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        self.ready_after_s = time.monotonic() - started
        return self

    def _failure(self, headline: str) -> PrometheusError:
        tail = log_tail(self.log_path, 20)
        return PrometheusError(f"{headline}; last 20 log lines:\n"
                               + ("\n".join(tail).rstrip() if tail is not None else "(no log)"))

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with PrometheusClient(self.url, timeout=2.0) as client:
            while True:
                rc = self.proc.poll()
                if rc is not None:
                    raise self._failure(f"prometheus on port {self.port} exited with code {rc} before it was ready")
                if client.ready():
                    return
                if time.monotonic() > deadline:
                    raise self._failure(f"prometheus on port {self.port} not ready after {timeout:.0f} s")
                time.sleep(0.25)

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        """An instant query's result vector (at: Unix seconds; None: now); ProbeError when Prometheus
        refuses it."""
        with PrometheusClient(self.url, timeout=10.0) as client:
            return client.query(expr, None if at is None else datetime.fromtimestamp(at, timezone.utc))

    def wait_scraped(self, timeout: float = 30) -> None:
        """Until every target has been scraped once: a counter needs a sample from before the load,
        or the load's growth is never seen (a burst that ends before the first scrape reads as none)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            up = {x["metric"].get("instance") for x in self.query("up") if x["value"][1] == "1"}
            if set(self.targets) <= up:
                return
            time.sleep(0.25)
        raise PrometheusError(f"not every target scraped within {timeout:.0f} s: {', '.join(self.targets)}")

    def stop(self, grace: float = 10) -> None:
        proc, self.proc = self.proc, None
        _live.discard(self)
        if proc is not None:
            children.stop(proc, grace, group=True, kill_wait=5, what="prometheus")
        self._tmp.cleanup()

    def __enter__(self) -> "LocalPrometheus":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
