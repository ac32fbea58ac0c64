"""The load generator's hot path: HTTP/1.1 POSTs with a streamed answer, on asyncio streams.

Why not httpx here (it stays the advisor's client everywhere else): per request it builds request
and response models, runs auth flows and matches the request against its pool's connections; on one
core that capped the rate held at about 800 requests per second, less than half of `vllm bench serve`
(benchmarks/loadgen_rate.py, benchmarks/README.md). This module does only what a streaming POST
needs: one pre-built header block, keep-alive connections kept per target, chunked or sized or
close-delimited bodies, read line by line.

It honours the same settings as the rest of the advisor: TLS through probes.http.ssl_context (the
same verification, CA bundle and opt-out), the same credentials (Basic or Bearer), and the caller's
total deadline per request (advisor/loadgen/client.py wraps each request in one). A reused
keep-alive connection that the server had closed is retried once on a fresh one, before any byte
of an answer was read; nothing else is ever retried.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

from advisor.errors import AdvisorError
from probes.http import BasicAuth, BearerAuth, HttpConfig, ssl_context

MAX_LINE = 1 << 20  # one SSE line; a server that sends more without a newline is an error
MAX_IDLE = 512


class WireError(AdvisorError):
    """The answer broke HTTP/1.1 (or a line ran past MAX_LINE); the connection is dropped."""


class ConnectError(AdvisorError, ConnectionError):
    """No connection: refused, unreachable, timed out, or the TLS handshake failed."""


class Response:
    def __init__(self, status: int, headers: dict[str, str], reader: asyncio.StreamReader):
        self.status_code, self.headers, self._reader = status, headers, reader
        te = headers.get("transfer-encoding", "").lower()
        self._chunked = "chunked" in te
        length = headers.get("content-length")
        self._left = int(length) if (length is not None and not self._chunked) else None
        self.complete = False  # the whole body was read: the connection may be reused

    async def _pieces(self) -> AsyncIterator[bytes]:
        r = self._reader
        if self._chunked:
            while True:
                size_line = await r.readline()
                if not size_line.endswith(b"\n"):
                    raise WireError("connection closed inside a chunked body")
                try:
                    size = int(size_line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise WireError(f"bad chunk size {size_line[:40]!r}") from None
                if size == 0:
                    while (await r.readline()).strip():  # trailers, then the blank line
                        pass
                    self.complete = True
                    return
                data = await r.readexactly(size + 2)
                yield data[:-2]
        elif self._left is not None:
            while self._left > 0:
                data = await r.read(min(self._left, 65536))
                if not data:
                    raise WireError("connection closed before the announced Content-Length")
                self._left -= len(data)
                yield data
            self.complete = True
        else:  # delimited by the connection's close
            while data := await r.read(65536):
                yield data

    async def aiter_lines(self) -> AsyncIterator[str]:
        buf = b""
        async for piece in self._pieces():
            buf += piece
            while (cut := buf.find(b"\n")) >= 0:
                line, buf = buf[:cut], buf[cut + 1:]
                yield line.rstrip(b"\r").decode("utf-8", errors="replace")
            if len(buf) > MAX_LINE:
                raise WireError(f"a line of the answer ran past {MAX_LINE} bytes")
        if buf:
            yield buf.rstrip(b"\r").decode("utf-8", errors="replace")

    async def aread(self, limit: int = 65536) -> bytes:
        out = b""
        async for piece in self._pieces():
            out += piece
            if len(out) >= limit:
                break
        return out


class Pool:
    """Keep-alive connections to one origin (scheme, host, port)."""

    def __init__(self, url: str, cfg: HttpConfig, connect_timeout: float = 10.0):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url}")
        self._tls = ssl_context(cfg) if parts.scheme == "https" else None
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.base = parts.path.rstrip("/")
        default = (parts.scheme == "https" and self.port == 443) or (parts.scheme == "http" and self.port == 80)
        host = self.host if ":" not in self.host else f"[{self.host}]"
        header = [f"Host: {host}" + ("" if default else f":{self.port}"), "User-Agent: llm-advisor-load",
                  "Accept: text/event-stream", "Content-Type: application/json"]
        auth = _authorization(cfg)
        if auth:
            header.append(f"Authorization: {auth}")
        self._header = ("\r\n".join(header) + "\r\n").encode("latin-1")
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._connect_timeout = connect_timeout

    async def _connect(self):
        try:
            async with asyncio.timeout(self._connect_timeout):
                return await asyncio.open_connection(self.host, self.port, ssl=self._tls, limit=MAX_LINE,
                                                     server_hostname=self.host if self._tls else None)
        except TimeoutError:
            raise ConnectError(f"connect timed out after {self._connect_timeout:g}s") from None
        except ssl.SSLError as e:
            raise ConnectError(f"TLS handshake failed: {e.reason or e}") from None
        except OSError as e:
            raise ConnectError(e.strerror or str(e) or type(e).__name__) from None

    @asynccontextmanager
    async def stream(self, path: str, body: bytes) -> AsyncIterator[Response]:
        """POST base+path with a JSON body; the answer's headers read, its body streamed by the caller.
        Leaving the block early (a cancellation, an error) closes the connection."""
        head = (f"POST {self.base}{path} HTTP/1.1\r\n".encode("latin-1") + self._header
                + f"Content-Length: {len(body)}\r\n\r\n".encode("latin-1"))
        conn, resp = None, None
        for attempt in (0, 1):
            reused = bool(self._idle) and attempt == 0
            conn = self._idle.pop() if reused else await self._connect()  # ConnectError: never retried
            reader, writer = conn
            try:
                writer.write(head + body)
                await writer.drain()
                resp = await _read_head(reader)
                break
            except (ConnectionError, asyncio.IncompleteReadError, WireError) as e:
                writer.close()
                if reused and not isinstance(e, WireError):
                    continue  # the server had closed an idle connection: once more, on a new one
                raise
        assert conn is not None and resp is not None
        reader, writer = conn
        try:
            yield resp
        except BaseException:
            writer.close()
            raise
        keep = resp.complete and resp.headers.get("connection", "").lower() != "close"
        if keep and len(self._idle) < MAX_IDLE:
            self._idle.append(conn)
        else:
            writer.close()

    def close(self) -> None:
        for _, writer in self._idle:
            writer.close()
        self._idle.clear()


async def _read_head(reader: asyncio.StreamReader) -> Response:
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionResetError("the server closed the connection before answering")
    parts = status_line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
        raise WireError(f"not an HTTP answer: {status_line[:60]!r}")
    try:
        status = int(parts[1])
    except ValueError:
        raise WireError(f"bad status line {status_line[:60]!r}") from None
    headers: dict[str, str] = {}
    while True:
        line = await reader.readline()
        if not line.endswith(b"\n"):
            raise WireError("connection closed inside the answer's headers")
        line = line.rstrip(b"\r\n")
        if not line:
            break
        name, _, value = line.partition(b":")
        headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    if status in (100, 103):  # informational: the real answer follows
        return await _read_head(reader)
    return Response(status, headers, reader)


def _authorization(cfg: HttpConfig) -> str | None:
    a = cfg.auth
    if isinstance(a, BearerAuth):
        return f"Bearer {a.token}"
    if isinstance(a, BasicAuth):
        return "Basic " + base64.b64encode(f"{a.user}:{a.password}".encode()).decode("ascii")
    return None


TRANSPORT_ERRORS = (OSError, asyncio.IncompleteReadError, WireError, ssl.SSLError)
