"""A fake OpenAI-compatible streaming server for unit tests of our own logic (launchers, load
generator error paths). Never a stand-in for the real engine in an e2e test.

    python -m tests.support.fake_openai --port P [--tokens 8] [--delay 0.002] [--fail-after N]
        [--cut-after N] [--status 500] [--max-num-seqs K] [--no-tokenize] [--tokenize-count N]
        [--metrics FILE ...] [--version-body TEXT] [--model-id NAME]

--fail-after N: requests after the Nth answer HTTP --status; --cut-after N: streams after the Nth
are cut mid-response (the connection closes without [DONE]). --metrics FILE (repeatable): GET /metrics
serves the files in turn, one per scrape, starting over after the last (a probe of as many scrapes
as files sees each once), e.g. crafted labels, duplicate
series or a counter reset; --version-body: the raw body of GET /version; --model-id: the id that
/v1/models lists (any text: a crafted model name). Extra argv (e.g. knob flags) is
accepted and echoed by GET /argv so tests can see which arm is serving.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--tokens", type=int, default=8)
    p.add_argument("--delay", type=float, default=0.002)
    p.add_argument("--fail-after", type=int, default=None)
    p.add_argument("--cut-after", type=int, default=None)
    p.add_argument("--status", type=int, default=500)
    p.add_argument("--no-tokenize", action="store_true", help="answer /tokenize with 404, like a server without one")
    p.add_argument("--tokenize-count", type=int, default=None,
                   help="answer /tokenize with this count for any text: prompts cannot be sized against it")
    p.add_argument("--metrics", action="append", default=[], help="file served at /metrics (repeat: served in turn, one per scrape)")
    p.add_argument("--version-body", default=None, help="raw body of GET /version")
    p.add_argument("--model-id", default="fake", help="the model id /v1/models lists")
    p.add_argument("--slots-from-max-num-seqs", action="store_true",
                   help="stream at most --max-num-seqs answers at once (vLLM's slots), the others queue for one")
    args, extra = p.parse_known_args(argv)
    slots = None
    if args.slots_from_max_num_seqs and "--max-num-seqs" in extra:
        slots = threading.BoundedSemaphore(int(extra[extra.index("--max-num-seqs") + 1]))
    lock = threading.Lock()
    count = {"n": 0, "scrapes": 0}
    metrics = [open(f, encoding="utf-8").read() for f in args.metrics]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self):
            super().setup()
            # As asyncio servers (vLLM's uvicorn) do: headers and body leave in separate writes, and
            # with Nagle on, each answer on a kept-alive connection waited out the client's delayed
            # ACK (40 ms a /tokenize call: 4 s of a fake experiment's prompt sizing).
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, *a):
            pass

        def _json(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _text(self, code, text, content_type="text/plain; version=0.0.4"):
            body = text.encode("utf-8")
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/health":
                return self._json(200, {})
            if self.path == "/argv":
                return self._json(200, {"argv": extra})
            if self.path == "/bind":  # the core binding a launcher gave this process (its replica's own)
                return self._json(200, {"bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND")})
            if self.path == "/v1/models":
                return self._json(200, {"data": [{"id": args.model_id, "max_model_len": 4096}]})
            if self.path == "/version":
                if args.version_body is not None:
                    return self._text(200, args.version_body, "application/json")
                return self._json(200, {"version": "fake-0"})
            if self.path == "/metrics" and metrics:
                with lock:
                    i = count["scrapes"]
                    count["scrapes"] += 1
                return self._text(200, metrics[i % len(metrics)])
            return self._json(404, {"error": "not found"})

        def do_POST(self):
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path == "/tokenize" and args.no_tokenize:
                return self._json(404, {"detail": "Not Found"})
            if self.path == "/tokenize":
                n = len(str(body.get("prompt", "")).split()) if args.tokenize_count is None else args.tokenize_count
                return self._json(200, {"count": n, "tokens": list(range(n)), "max_model_len": 4096})
            with lock:
                count["n"] += 1
                n = count["n"]
            if args.fail_after is not None and n > args.fail_after:
                return self._json(args.status, {"error": {"message": "overloaded", "code": args.status}})
            tokens = int(body.get("max_tokens", args.tokens))
            if not body.get("stream"):
                return self._json(200, {"choices": [{"index": 0, "text": "x" * tokens,
                                                     "logprobs": {"tokens": ["x"] * tokens}}],
                                        "usage": {"completion_tokens": tokens}})
            if slots is not None:
                with slots:
                    return self._stream(body, tokens, n)
            return self._stream(body, tokens, n)

        def _stream(self, body, tokens, n):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            cut = args.cut_after is not None and n > args.cut_after
            for i in range(tokens):
                if cut and i == tokens // 2:
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                time.sleep(args.delay)
                key = "delta" if "messages" in body else "text"
                choice = {"index": 0, key: {"content": "x"} if key == "delta" else "x"}
                self._chunk({"choices": [choice]})
            self._chunk({"choices": [], "usage": {"completion_tokens": tokens}})
            self._send_raw(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")

        def _chunk(self, obj):
            self._send_raw(f"data: {json.dumps(obj)}\n\n".encode())

        def _send_raw(self, data: bytes):
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    # The default listen backlog of 5 refuses bursts of connections; a real engine's is larger.
    ThreadingHTTPServer.request_queue_size = 256
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
