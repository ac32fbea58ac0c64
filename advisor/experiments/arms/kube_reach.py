"""Reaching an arm's pod through the Kubernetes API server (`kubernetes.reach: pods-proxy`), for an
advisor that runs outside the cluster, on a network that does not route pod IPs.

Each ready pod gets a relay: a loopback HTTP listener that forwards every request to the pod's
engine port through the API server's pods proxy (`/api/v1/namespaces/NS/pods/NAME:PORT/proxy/...`)
with the kubeconfig's credentials, and streams the answer back as it arrives. Everything that talks
to an arm (the load generator and its worker processes, the /metrics watch, the health and
configuration checks) is handed `http://127.0.0.1:PORT` and stays as it is for local arms; the
cluster's credentials never leave this process.

Why the pods proxy and not port-forward: it is plain HTTP on the client the launcher already has
(lightkube has no port-forward), and the API server relays a `text/event-stream` answer without
delay: Go's ReverseProxy flushes a stream of Server-Sent Events, or any body of unknown length, as
each piece arrives, whatever the proxy's 200 ms flush interval (k8s.io/apimachinery's upgradeaware
handler). Both arms go the same way, so the extra hop is in both. What it costs: every request
crosses the API server (its CPU, its rate limits, its priority and fairness queues), and the API
server takes the Authorization header for itself, so an engine started with `--api-key` cannot be
reached this way (use pod-ip from inside the cluster).
"""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from advisor import escape
from advisor.experiments.arms.kube_api import Kube, KubeError

# Not passed on: hop-by-hop headers, and the Authorization meant for the engine (the API server
# would take it for its own and the request would carry the engine's key to it).
_NOT_PASSED = {"authorization", "host", "connection", "keep-alive", "transfer-encoding", "content-length",
               "proxy-connection", "upgrade", "te", "trailer", "proxy-authorization"}
# A generation can take minutes between two tokens only when something is wrong; the load
# generator's own timeouts end a request sooner.
READ_TIMEOUT_S = 600.0


class PodRelay:
    """A loopback listener relaying to one pod's port through the pods proxy; `url` is where it
    serves. close() stops it (requests in flight are cut)."""

    def __init__(self, kube: Kube, pod: str, port: int):
        handler = type("_BoundRelay", (_Relay,), {"kube": kube, "pod": pod, "pod_port": port})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self.pod = pod
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"relay-{pod}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class _Relay(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    kube: Kube
    pod: str
    pod_port: int

    def setup(self) -> None:
        super().setup()
        # Headers and each streamed piece are small separate writes: with Nagle's algorithm on, each
        # waits for the client's delayed ACK (40 ms), which would read as time to the first token.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's names
        self._relay("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._relay("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self._relay("PUT")

    def do_DELETE(self) -> None:  # noqa: N802
        self._relay("DELETE")

    def _relay(self, method: str) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _NOT_PASSED}
        # What the client asked for, not httpx's default gzip: the body is passed on byte for byte.
        headers.setdefault("Accept-Encoding", "identity")
        try:
            answer = self.kube.pod_proxy(method, self.pod, self.pod_port, self.path, headers, body, READ_TIMEOUT_S)
        except KubeError as e:
            data = (escape.one_line(str(e), 300) + "\n").encode()
            self.send_response(502)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        try:
            self.send_response(answer.status_code)
            for k, v in answer.headers.multi_items():
                if k.lower() not in _NOT_PASSED:
                    self.send_header(k, v)
            kind = answer.headers.get("content-type", "").split(";")[0].strip()
            if kind != "text/event-stream" and "content-length" in answer.headers:
                data = answer.read()
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for piece in answer.iter_raw():
                if piece:
                    self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                    self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):  # the client gave up: the pod's request is closed too
            self.close_connection = True
        except Exception:  # noqa: BLE001 - the API server cut the stream: so does the relay
            self.close_connection = True
        finally:
            answer.close()
