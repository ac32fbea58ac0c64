"""A stranger's 300 MB POST against the real `advisor serve` (uvicorn on 127.0.0.1): refused with
413 from its Content-Length, or once a chunked body passes the limit, and a 401 route that never
reads its body closes the connection instead of draining it; the server's resident memory grows by
under 100 MB throughout. The bodies are generated 64 KiB at a time, so the test holds none of them."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import threading
import time

import httpx
import psutil
import pytest

from tests.support.servers import ROOT, free_port

pytestmark = pytest.mark.timeout(300)

BODY = 300 * 2**20
PIECE = b"x" * 65536
TOKEN = "body-limit-token"


@pytest.fixture
def server(tmp_path):
    """`advisor serve` on a free port of 127.0.0.1, its store and data under tmp_path: (port, pid)."""
    spec = tmp_path / "dep.yaml"
    spec.write_text("name: local\nengine: vllm\nmodel: tiny\nlauncher: endpoints\n"
                    "endpoints: {baseline: 'http://127.0.0.1:9', candidate: 'http://127.0.0.1:10'}\n")
    (tmp_path / "advisor.yaml").write_text(
        json.dumps({"deployments": [{"name": "local", "prom_url": "http://127.0.0.1:9", "deployment": str(spec)}]}))
    port = free_port()
    env = {**os.environ, "ADVISOR_API_TOKEN": TOKEN, "ADVISOR_DATA_DIR": str(tmp_path / "data"),
           "ADVISOR_DB_URL": f"sqlite:///{tmp_path / 'advisor.db'}"}
    env.pop("ADVISOR_MAX_BODY_BYTES", None)  # the default limit, 4 MiB
    log = open(tmp_path / "serve.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "advisor.cli", "serve", "--config", str(tmp_path / "advisor.yaml"),
                             "--port", str(port), "--no-schedule"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            env=env)
    try:
        deadline = time.monotonic() + 90
        while not _answers(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("advisor serve did not answer: " + (tmp_path / "serve.log").read_text()[-3000:])
            time.sleep(0.3)
        yield port, proc.pid
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/api/deployments", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


class PeakRSS:
    """The highest resident memory of a process, sampled every 10 ms while in the with block."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.peak = self.start = self.process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, self.process.memory_info().rss)

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def growth_mb(self) -> float:
        return (self.peak - self.start) / 2**20


def post(port: int, path: str, chunked: bool, size: int = BODY) -> tuple[int, dict, int]:
    """POSTs a body of `size` bytes without a token, written a piece at a time until the server
    answers or closes: (status, JSON body, bytes of body sent)."""
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}"
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n{framing}\r\n\r\n"
    frame = b"%x\r\n%s\r\n" % (len(PIECE), PIECE) if chunked else PIECE
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head.encode())
        while sent < size and not select.select([sock], [], [], 0)[0]:  # until the answer (or the close) is there
            try:
                sock.sendall(frame)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(PIECE)
        if chunked and sent >= size:
            sock.sendall(b"0\r\n\r\n")  # all of it went (no limit held): end the body, read the answer
        response = _read(sock)
    status_line, _, rest = response.partition(b"\r\n")
    body = rest.partition(b"\r\n\r\n")[2]
    return int(status_line.split()[1]), json.loads(body), sent


def _read(sock: socket.socket) -> bytes:
    """The response, up to the server's close (the connection must close after it)."""
    data = b""
    while True:
        try:
            got = sock.recv(65536)
        except ConnectionResetError:  # the close of a connection with our unread body on it
            return data
        if not got:
            return data
        data += got


def test_a_300_mb_post_is_refused_before_the_token_and_never_held(server):
    port, pid = server
    warm = httpx.post(f"http://127.0.0.1:{port}/api/deployments/local/experiments", json={"mechanism": "max_num_seqs"})
    assert warm.status_code == 401  # the route, its imports and its first request are warm
    with PeakRSS(pid) as rss:
        status, body, sent = post(port, "/api/deployments/local/experiments", chunked=False)
        assert status == 413 and body["detail"] == "request body over 4194304 bytes (ADVISOR_MAX_BODY_BYTES)"
        assert sent < 64 * 2**20, "answered from the Content-Length, with most of the body never sent"

        status, body, sent = post(port, "/api/deployments/local/experiments", chunked=True)
        assert status == 413, body
        assert sent < 64 * 2**20, "a chunked body is cut off at the limit"

        # A route that answers 401 without reading its body: the rest is not drained after it.
        status, body, sent = post(port, "/api/deployments/local/diagnoses", chunked=True)
        assert status == 401, body
        assert sent < 64 * 2**20
    assert rss.growth_mb < 100, f"the server's memory grew by {rss.growth_mb:.0f} MB"
    assert _answers(port), "and it still serves"
