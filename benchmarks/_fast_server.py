"""A fast OpenAI-compatible mock for load-generator benchmarks: never the bottleneck.

Plain asyncio (asyncio.Protocol, keep-alive HTTP/1.1, no framework) so that one core answers far
more requests per second than any client under test sends. Every completion streams TOKENS (16)
tokens as server-sent events, then a usage event and [DONE]; the whole response goes out in one
write, so the server spends one send per request while the client still parses every event.

  POST /v1/completions, /v1/chat/completions   streamed (or not, with "stream": false)
  GET  /v1/models, /health                     what clients probe before they start
  GET  /stats                                  {"requests": n, "cpu_s": this process's CPU seconds}

Run: python benchmarks/_fast_server.py --port 8123 [--cpu 0]   (listens on 127.0.0.1 only)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

HOST = "127.0.0.1"
TOKENS = 16
MODEL = "tiny-llama"

_served = 0


def _response(status: str, body: bytes, content_type: str) -> bytes:
    return (f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {len(body)}\r\n"
            f"connection: keep-alive\r\n\r\n").encode() + body


def _stream(chat: bool, model: str, prompt_tokens: int, include_usage: bool) -> bytes:
    created = int(time.time())
    rid = f"cmpl-{_served}"
    kind = "chat.completion.chunk" if chat else "text_completion"
    events = []
    for i in range(TOKENS):
        last = i == TOKENS - 1
        choice = ({"index": 0, "delta": {"content": f" tok{i}"}, "finish_reason": "length" if last else None}
                  if chat else {"index": 0, "text": f" tok{i}", "finish_reason": "length" if last else None})
        events.append({"id": rid, "object": kind, "created": created, "model": model, "choices": [choice]})
    if include_usage:
        events.append({"id": rid, "object": kind, "created": created, "model": model, "choices": [],
                       "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": TOKENS,
                                 "total_tokens": prompt_tokens + TOKENS}})
    body = "".join(f"data: {json.dumps(e, separators=(',', ':'))}\n\n" for e in events) + "data: [DONE]\n\n"
    return _response("200 OK", body.encode(), "text/event-stream")


def _whole(chat: bool, model: str, prompt_tokens: int) -> bytes:
    text = "".join(f" tok{i}" for i in range(TOKENS))
    choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
              if chat else {"index": 0, "text": text, "finish_reason": "length"})
    body = {"id": f"cmpl-{_served}", "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()), "model": model, "choices": [choice],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": TOKENS,
                      "total_tokens": prompt_tokens + TOKENS}}
    return _response("200 OK", json.dumps(body).encode(), "application/json")


def answer(method: str, path: str, body: bytes) -> bytes:
    global _served
    path = path.split("?", 1)[0]
    if method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
        _served += 1
        chat = path.endswith("chat/completions")
        try:
            req = json.loads(body or b"{}")
        except ValueError:
            return _response("400 Bad Request", b'{"error":"body is not JSON"}', "application/json")
        prompt = req.get("prompt") if not chat else " ".join(str(m.get("content", "")) for m in req.get("messages", []))
        prompt_tokens = len(str(prompt or "").split())
        model = req.get("model") or MODEL
        if req.get("stream"):
            usage = bool((req.get("stream_options") or {}).get("include_usage"))
            return _stream(chat, model, prompt_tokens, usage)
        return _whole(chat, model, prompt_tokens)
    if method == "GET" and path == "/v1/models":
        body = {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "mock",
                                            "max_model_len": 2048}]}
        return _response("200 OK", json.dumps(body).encode(), "application/json")
    if method == "GET" and path == "/health":
        return _response("200 OK", b"", "text/plain")
    if method == "GET" and path == "/stats":
        stats = {"requests": _served, "cpu_s": time.process_time()}
        return _response("200 OK", json.dumps(stats).encode(), "application/json")
    return _response("404 Not Found", b'{"error":"not found"}', "application/json")


class Http(asyncio.Protocol):
    """Keep-alive HTTP/1.1: Content-Length bodies (every client here sends those), pipelining safe."""

    def connection_made(self, transport):
        self.transport = transport
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1").split("\r\n")
            length = 0
            close = False
            for line in head[1:]:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                if name == "content-length":
                    length = int(value.strip())
                elif name == "connection" and value.strip().lower() == "close":
                    close = True
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4:end + 4 + length]
            self.buf = self.buf[end + 4 + length:]
            method, path, *_ = head[0].split(" ")
            self.transport.write(answer(method, path, body))
            if close:
                self.transport.close()
                return


async def serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Http, HOST, port, backlog=4096)
    async with server:
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--cpu", type=int, help="pin this process to one CPU")
    args = ap.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    try:
        asyncio.run(serve(args.port))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
