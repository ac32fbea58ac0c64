"""Debian's prometheus-alertmanager as the tests start it: one receiver, `advisor serve`'s webhook
with the API token, and the polling both the integration and the e2e tests do around it."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import yaml


def wait_for(fn, timeout: float, what: str, logs: tuple[Path, ...] = ()):
    """fn()'s first truthy answer; the test fails after `timeout` s, with the tail of each log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(0.25)
    pytest.fail(f"timed out waiting for {what}\n" + "\n".join(f"--- {p}\n{p.read_text()[-2000:]}" for p in logs))


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def start(work: Path, port: int, webhook: str, token: str, *, group_interval: str, repeat_interval: str,
          send_resolved: bool = False) -> subprocess.Popen:
    """Alertmanager on 127.0.0.1:port (its externalURL that address), every alert routed to
    `webhook` with `token` as Alertmanager's http_config.authorization; its log in work/am.log."""
    receiver = {"url": webhook, "http_config": {"authorization": {"type": "Bearer", "credentials": token}}}
    if send_resolved:
        receiver["send_resolved"] = True
    (work / "am.yml").write_text(yaml.safe_dump({
        "route": {"receiver": "advisor", "group_by": ["alertname", "deployment"], "group_wait": "1s",
                  "group_interval": group_interval, "repeat_interval": repeat_interval},
        "receivers": [{"name": "advisor", "webhook_configs": [receiver]}]}))
    return subprocess.Popen(["prometheus-alertmanager", f"--config.file={work / 'am.yml'}",
                             f"--storage.path={work / 'am-data'}", f"--web.listen-address=127.0.0.1:{port}",
                             f"--web.external-url=http://127.0.0.1:{port}", "--cluster.listen-address="],
                            stdout=(work / "am.log").open("w"), stderr=subprocess.STDOUT)


def query(url: str, *matchers: str) -> list[dict]:
    """`amtool alert query MATCHERS -o json`: the alerts Alertmanager holds (the active ones, unless
    a flag such as --silenced says otherwise)."""
    q = subprocess.run(["amtool", "alert", "query", *matchers, "-o", "json", f"--alertmanager.url={url}"],
                       capture_output=True, text=True, timeout=30)
    assert q.returncode == 0, q.stdout + q.stderr
    return json.loads(q.stdout or "[]")
