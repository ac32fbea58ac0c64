"""Defences that wrap the whole application, outside routing, authentication and error handling,
so that they hold for every response: pages, the API, errors, 404s, a 500.

BodyLimit refuses a request body over the limit before anything reads it: a stranger's 300 MB POST
is answered 413 from its Content-Length, or after the limit's worth of a chunked body, and never
held in memory (FastAPI reads a route's body before its token is checked). SecurityHeaders adds
the Content-Security-Policy (scripts only with this response's nonce), nosniff, no framing and no
referrer.
"""

from __future__ import annotations

import json
import secrets

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from advisor.reports.html import SCRIPT_NONCE

DEFAULT_MAX_BODY_BYTES = 4 * 2**20
# style-src needs 'unsafe-inline': the pages' own <style> block and the style attributes of
# matplotlib's SVG (a nonce cannot cover attributes). Every value in them is escaped text, so that
# allows no script. img-src: matplotlib may embed a raster as a data: URI.
CSP = ("default-src 'none'; script-src 'nonce-{nonce}'; style-src 'unsafe-inline'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
_FIXED_HEADERS = [(b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"),
                  (b"referrer-policy", b"no-referrer")]
_OURS = {b"content-security-policy"} | {name for name, _ in _FIXED_HEADERS}


class BodyLimit:
    """413 for a request body over `max_bytes`: at once from its Content-Length, without calling
    the application; for a chunked body, as soon as the chunks counted pass the limit. Either way
    the connection is closed after the answer, so the rest is never read."""

    def __init__(self, app: ASGIApp, max_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await _too_large(send, self.max_bytes)
            return
        await _Counted(self, scope, receive, send).run()


class _Counted:
    """One request whose body is counted as the application reads it."""

    def __init__(self, limit: BodyLimit, scope: Scope, receive: Receive, send: Send) -> None:
        self.limit, self.scope, self._receive, self._send = limit, scope, receive, send
        self.received = 0
        self.body_done = not _may_have_body(scope)
        self.started = False  # the application's response has begun
        self.refused = False  # our 413 went out instead

    async def run(self) -> None:
        try:
            await self.limit.app(self.scope, self.receive, self.send)
        except Exception:
            # After the 413 the application was told the client left; what it raises about that
            # (a ClientDisconnect, a failed body parse) concerns a request already answered.
            if not self.refused:
                raise

    async def receive(self) -> Message:
        if self.refused:
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] != "http.request":
            return message
        self.received += len(message.get("body", b""))
        self.body_done = not message.get("more_body", False)
        if self.received <= self.limit.max_bytes:
            return message
        if not self.started:
            self.refused = True
            await _too_large(self._send, self.limit.max_bytes)
        # The application stops reading at a disconnect; nothing more of the body is taken in.
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if self.refused:
            return  # the 413 is the answer: what the application says after it is dropped
        if message["type"] == "http.response.start":
            self.started = True
            if not self.body_done:
                # A body the application did not read (a 401 before it) is not drained after the
                # answer: the connection closes instead.
                message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
        await self._send(message)


class SecurityHeaders:
    """Adds the security headers to every response, and sets this response's script nonce for the
    templates (advisor.reports.html reads SCRIPT_NONCE)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        nonce = secrets.token_urlsafe(18)
        headers = [(b"content-security-policy", CSP.format(nonce=nonce).encode()), *_FIXED_HEADERS]

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in _OURS]
                message = {**message, "headers": kept + headers}
            await send(message)

        token = SCRIPT_NONCE.set(nonce)
        try:
            await self.app(scope, receive, with_headers)
        finally:
            SCRIPT_NONCE.reset(token)


async def _too_large(send: Send, max_bytes: int) -> None:
    body = json.dumps({"detail": f"request body over {max_bytes} bytes (ADVISOR_MAX_BODY_BYTES)"}).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


def _header(scope: Scope, name: bytes) -> bytes | None:
    return next((v for k, v in scope.get("headers", []) if k.lower() == name), None)


def _content_length(scope: Scope) -> int | None:
    raw = _header(scope, b"content-length")
    try:
        return int(raw) if raw is not None else None
    except ValueError:  # the server (h11) refuses a malformed one before the application sees it
        return None


def _may_have_body(scope: Scope) -> bool:
    return _header(scope, b"transfer-encoding") is not None or (_content_length(scope) or 0) > 0
