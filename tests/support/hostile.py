"""Servers on 127.0.0.1 that misbehave the ways production targets do, for the HTTP stack's tests:

- `dribbling_server("headers" | "body")`: answers a byte every 0.25 s, forever (headers that never
  end, or a body far longer than anyone waits for). Every single read succeeds well within any
  per-read timeout, so only a total deadline ends a request.
- `endless_server()`: a body that never ends, sent as fast as it is read.
- `prom_stand_in(tls=..., require_auth=...)`: a minimal Prometheus (metric names, instant queries
  by POST or GET) over HTTP or HTTPS (a trustme certificate for 127.0.0.1), that records the
  Authorization header of every request.
"""

from __future__ import annotations

import json
import re
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

BYTE_EVERY_S = 0.25
PART = re.compile(r'"__advisor_part", "([^"]+)"')
NAMES = ["vllm:num_requests_running", "vllm:num_requests_waiting"]


@contextmanager
def serving(handle: Callable[[socket.socket, threading.Event], None]) -> Iterator[str]:
    """A raw TCP server on 127.0.0.1: each connection gets its own thread running handle(conn, stop)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    stop = threading.Event()

    def one(conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                handle(conn, stop)
            except OSError:
                pass

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=one, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    finally:
        stop.set()
        srv.close()


@contextmanager
def dribbling_server(where: str) -> Iterator[str]:
    """where="headers": the status line, then a header that never ends; "body": complete headers
    announcing 1 MB, then the body a byte at a time."""
    if where == "headers":
        at_once, answer = b"", b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Slow: " + b"a" * 1_000_000
    elif where == "body":
        at_once = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n"
        answer = b"[" * 1_000_000
    else:
        raise ValueError(where)

    def handle(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(at_once)
        for i in range(len(answer)):
            if stop.wait(BYTE_EVERY_S):
                return
            conn.sendall(answer[i:i + 1])

    with serving(handle) as url:
        yield url


@contextmanager
def silent_server(asked: threading.Event | None = None) -> Iterator[str]:
    """Accepts, reads the request, and never answers; `asked` is set once a request was read."""
    def handle(conn: socket.socket, stop: threading.Event) -> None:
        if asked is not None:
            asked.set()
        stop.wait()

    with serving(handle) as url:
        yield url


@contextmanager
def endless_server() -> Iterator[str]:
    """Answers 200 with a chunked body that never ends, as fast as the client reads it."""
    chunk = b"%x\r\n%s\r\n" % (65536, b"x" * 65536)

    def handle(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
        while not stop.is_set():
            conn.sendall(chunk)

    with serving(handle) as url:
        yield url


@dataclass
class Certs:
    """A CA (its PEM at ca_pem) and a server certificate for 127.0.0.1 signed by it."""

    ca_pem: Path
    server_context: ssl.SSLContext


def make_certs(tmp: Path, host: str = "127.0.0.1") -> Certs:
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert(host)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cert.configure_cert(ctx)
    path = tmp / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return Certs(ca_pem=path, server_context=ctx)


@dataclass
class PromStandIn:
    url: str
    authorization: list[str | None] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)


@contextmanager
def prom_stand_in(tls: Certs | None = None, require_auth: str | None = None) -> Iterator[PromStandIn]:
    """require_auth: the exact Authorization header wanted (else 401)."""
    state = PromStandIn(url="")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def _answer(self) -> None:
            u = urlsplit(self.path)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
            form = {k: v[0] for k, v in parse_qs(body if self.command == "POST" else u.query).items()}
            state.authorization.append(self.headers.get("Authorization"))
            state.paths.append(u.path)
            if require_auth is not None and self.headers.get("Authorization") != require_auth:
                return self._send(401, {"status": "error", "error": "unauthorized"})
            if u.path == "/api/v1/label/__name__/values":
                return self._send(200, {"status": "success", "data": NAMES})
            if u.path == "/api/v1/query":
                parts = PART.findall(form.get("query", "")) or [None]
                rows = [{"metric": {"__advisor_part": p} if p else {}, "value": [0, "2"]} for p in parts]
                return self._send(200, {"status": "success", "data": {"resultType": "vector", "result": rows}})
            return self._send(404, {"status": "error", "error": "not found"})

        do_GET = do_POST = _answer

        def _send(self, status: int, obj: dict) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    if tls is not None:
        server.socket = tls.server_context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state.url = f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
