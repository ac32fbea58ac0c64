"""One HTTP stack for the advisor's own requests: TLS settings, credentials, and a total deadline.

- `HttpConfig` says how to talk to one kind of target: verify certificates (the default) or not,
  with which CA bundle, with which credentials (basic or bearer), and the deadline of a request.
- `client()` / `async_client()` build httpx clients from it. Their connections go through a network
  backend that bounds every socket operation (connect, TLS handshake, each write and each read) by
  min(its own timeout, the time left to the request's deadline). httpx's own timeouts apply to each
  operation alone, so a server that answers one byte a second would otherwise never time out.
- `request()` sends one request and reads its whole answer within a TOTAL deadline (connect,
  headers and body together), and turns every failure into one line: `TargetUnreachable`, or
  `TlsError` for a certificate that is not trusted.
- `split_userinfo()` takes `user:password@` out of a URL (into a `BasicAuth`), `redact_url()` and
  `redact_text()` hide credentials (and, when asked, a secret path) wherever a URL is shown.

Nothing here reads the advisor's settings: the advisor builds the `HttpConfig` (advisor/net.py).
"""

from __future__ import annotations

import os
import re
import ssl
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Union
from urllib.parse import unquote

import httpcore
import httpx

from probes.errors import ProbeError, TargetUnreachable
from probes.redaction import _SCHEME, redact_text, redact_url  # noqa: F401  (re-exported)
from probes.exposition import MAX_LINES

TLS_HINT = "give --ca-bundle or --insecure"


class TlsError(TargetUnreachable):
    """The target's TLS certificate is not trusted (or the TLS handshake failed)."""


class TlsConfigError(ProbeError):
    """The CA bundle cannot be used."""


class BadUrl(ProbeError):
    """Not an http(s) URL."""


# --- configuration ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class BasicAuth:
    user: str
    password: str = field(repr=False)

    def __repr__(self) -> str:
        return f"BasicAuth(user={self.user!r}, password='***')"


@dataclass(frozen=True)
class BearerAuth:
    token: str = field(repr=False)

    def __repr__(self) -> str:
        return "BearerAuth(token='***')"


Auth = Union[BasicAuth, BearerAuth]


# The most of a target's answer that is read, beyond the body cap of every request: past these a
# probe stops with one line naming the cap (the advisor's settings raise them: advisor/net.py).
# Series in one Prometheus answer (about 200 per vLLM replica in the per-replica query, 250 bytes
# each: near the 64 MiB body cap): ADVISOR_MAX_SERIES
MAX_SERIES = 250_000
MAX_METRICS_LINES = MAX_LINES  # lines of one /metrics page: ADVISOR_MAX_METRICS_LINES
MAX_METRICS_BYTES = 64 * 1024 * 1024  # bytes of one /metrics page: ADVISOR_MAX_METRICS_BYTES


@dataclass(frozen=True)
class HttpConfig:
    """verify: check the server's certificate (off only on an explicit opt-out); ca_bundle: a PEM
    file (or a directory of hashed certificates) trusted instead of the default store; auth: sent
    with every request; timeout: the total deadline of one request, in seconds; max_series,
    max_metrics_lines, max_metrics_bytes: the most of an answer a probe reads (a Prometheus
    answer's series, an engine's /metrics lines and bytes)."""

    verify: bool = True
    ca_bundle: Path | None = None
    auth: Auth | None = None
    timeout: float = 10.0
    max_series: int = MAX_SERIES
    max_metrics_lines: int = MAX_METRICS_LINES
    max_metrics_bytes: int = MAX_METRICS_BYTES

    def with_(self, **changes: Any) -> "HttpConfig":
        return replace(self, **changes)


@lru_cache(maxsize=8)
def _ssl_context(verify: bool, ca_bundle: Path | None) -> ssl.SSLContext:
    if not verify:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    if ca_bundle is None:
        return httpx.create_ssl_context()  # certifi, or SSL_CERT_FILE / SSL_CERT_DIR when set
    try:
        mode = os.stat(ca_bundle).st_mode
    except OSError:
        mode = None
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        # OpenSSL would open and read a FIFO until a writer closes it: no deadline covers that.
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a device or socket"
        raise TlsConfigError(f"CA bundle {ca_bundle}: not a regular file ({kind})")
    try:
        if Path(ca_bundle).is_dir():
            return ssl.create_default_context(capath=str(ca_bundle))
        return ssl.create_default_context(cafile=str(ca_bundle))
    except FileNotFoundError:
        raise TlsConfigError(f"CA bundle {ca_bundle}: no such file") from None
    except ssl.SSLError as e:
        raise TlsConfigError(f"CA bundle {ca_bundle} holds no usable PEM certificate ({e.reason or e})") from None
    except (OSError, ValueError) as e:
        raise TlsConfigError(f"CA bundle {ca_bundle}: cannot read: {getattr(e, 'strerror', None) or e}") from None


def ssl_context(cfg: HttpConfig) -> ssl.SSLContext:
    """One context per (verify, CA bundle), shared by every client: building one loads the trust store."""
    return _ssl_context(cfg.verify, Path(cfg.ca_bundle) if cfg.ca_bundle else None)


class _Bearer(httpx.Auth):
    def __init__(self, token: str):
        self._header = f"Bearer {token}"

    def auth_flow(self, request: httpx.Request):
        request.headers["Authorization"] = self._header
        yield request


def _httpx_auth(auth: Auth | None) -> httpx.Auth | None:
    if isinstance(auth, BasicAuth):
        return httpx.BasicAuth(auth.user, auth.password)
    if isinstance(auth, BearerAuth):
        return _Bearer(auth.token)
    return None


# --- the total deadline -----------------------------------------------------------------------------

_deadline: ContextVar[float | None] = ContextVar("advisor_http_deadline", default=None)


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Every socket operation of our clients inside the block ends by `seconds` from now (an
    enclosing, earlier deadline stands)."""
    at = time.monotonic() + seconds
    outer = _deadline.get()
    token = _deadline.set(at if outer is None else min(at, outer))
    try:
        yield
    finally:
        _deadline.reset(token)


def _bound(timeout: float | None, exc: type[Exception]) -> float | None:
    at = _deadline.get()
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise exc("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream):
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _bound(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        return self._inner.write(buffer, _bound(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, _bound(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self, inner: httpcore.NetworkBackend):
        self._inner = inner

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        return _Stream(self._inner.connect_tcp(host, port, _bound(timeout, httpcore.ConnectTimeout),
                                               local_address, socket_options))

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        return _Stream(self._inner.connect_unix_socket(path, _bound(timeout, httpcore.ConnectTimeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _AsyncStream(httpcore.AsyncNetworkStream):
    def __init__(self, inner: httpcore.AsyncNetworkStream):
        self._inner = inner

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, _bound(timeout, httpcore.ReadTimeout))

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        return await self._inner.write(buffer, _bound(timeout, httpcore.WriteTimeout))

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore.AsyncNetworkStream:
        return _AsyncStream(await self._inner.start_tls(ssl_context, server_hostname,
                                                        _bound(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _AsyncBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, inner: httpcore.AsyncNetworkBackend):
        self._inner = inner

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        return _AsyncStream(await self._inner.connect_tcp(host, port, _bound(timeout, httpcore.ConnectTimeout),
                                                          local_address, socket_options))

    async def connect_unix_socket(self, path, timeout=None, socket_options=None):
        return _AsyncStream(await self._inner.connect_unix_socket(path, _bound(timeout, httpcore.ConnectTimeout),
                                                                  socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def _arm(client: httpx.Client | httpx.AsyncClient) -> None:
    """Route every connection of the client's own transports (and its proxy transports) through the
    deadline backend. httpx has no public hook for a network backend: its transports keep their
    httpcore pool in `_pool`, and the pool its backend in `_network_backend` (checked, so that an
    httpx or httpcore upgrade that moves them fails loudly here rather than losing the deadline)."""
    wrap = _AsyncBackend if isinstance(client, httpx.AsyncClient) else _Backend
    for t in [client._transport, *client._mounts.values()]:
        if not isinstance(t, (httpx.HTTPTransport, httpx.AsyncHTTPTransport)):
            continue  # a caller's own transport (tests: MockTransport), or no proxy for a pattern
        pool = getattr(t, "_pool", None)
        inner = getattr(pool, "_network_backend", None)
        if inner is None:
            raise RuntimeError("httpx/httpcore internals changed: cannot install the request deadline")
        if not isinstance(inner, wrap):
            pool._network_backend = wrap(inner)


def client(cfg: HttpConfig, *, transport: httpx.BaseTransport | None = None, **kw: Any) -> httpx.Client:
    """A sync client for `cfg`; use `request()` on it for the total deadline."""
    c = httpx.Client(verify=ssl_context(cfg), auth=_httpx_auth(cfg.auth), timeout=cfg.timeout,
                     transport=transport, **kw)
    _arm(c)
    return c


def async_client(cfg: HttpConfig, *, deadline: bool = True, transport: httpx.AsyncBaseTransport | None = None,
                 **kw: Any) -> httpx.AsyncClient:
    """An async client for `cfg` (TLS and credentials). deadline=False leaves the connections
    unwrapped: for the load generator, whose per-request timeouts are its own."""
    kw.setdefault("timeout", cfg.timeout)
    c = httpx.AsyncClient(verify=ssl_context(cfg), auth=_httpx_auth(cfg.auth), transport=transport, **kw)
    if deadline:
        _arm(c)
    return c


# The most of an answer that is read (decoded): an endless body ends here, not in memory.
MAX_BODY_BYTES = 64 * 1024 * 1024
_HOP = {"content-encoding", "content-length", "transfer-encoding"}


class TooLarge(ProbeError):
    """The answer's body is larger than the limit."""


def _read(r: httpx.Response, chunks: list[bytes], size: int, limit: int, url: str, what: str,
          raise_with: str = "") -> httpx.Response:
    """The answer as an ordinary (read) response, its body already decoded."""
    if size > limit:
        shown = f"{limit // (1024 * 1024)} MiB" if limit >= 1024 * 1024 else f"{limit:,} bytes"
        raise TooLarge(f"{what} at {_base(redact_url(url))} answered {_path(redact_url(url))} with more than "
                       f"{shown}: refused" + (f" ({raise_with} raises the cap)" if raise_with else ""))
    headers = [(k, v) for k, v in r.headers.multi_items() if k.lower() not in _HOP]
    ext = {k: v for k, v in r.extensions.items() if k in ("http_version", "reason_phrase")}
    return httpx.Response(r.status_code, headers=headers, content=b"".join(chunks), request=r.request, extensions=ext)


def _userinfo_as_auth(url: str, kw: dict) -> tuple[str, dict]:
    """User info left in a URL (a deployment file's, say) is sent as basic auth, and the URL that
    httpx sees, logs and puts in its errors is the one without it."""
    clean, userinfo = split_userinfo(url)
    if userinfo is None:
        return url, kw
    return clean, {"auth": httpx.BasicAuth(userinfo.user, userinfo.password), **kw}


def request(c: httpx.Client, method: str, url: str, *, what: str = "server", timeout: float | None = None,
            max_bytes: int = MAX_BODY_BYTES, raise_with: str = "", **kw: Any) -> httpx.Response:
    """Send one request and read its whole answer within `timeout` seconds in all (default: the
    client's), connect, headers and body together, and at most `max_bytes` of body. Any HTTP
    status is returned; a failure to get one is raised as one line (TargetUnreachable, TlsError,
    TooLarge, which names `raise_with`: how to raise the cap)."""
    total = float(timeout if timeout is not None else (c.timeout.read or 10.0))
    url, kw = _userinfo_as_auth(url, kw)
    try:
        with deadline(total), c.stream(method, url, timeout=total, **kw) as r:
            chunks, size = [], 0
            for chunk in r.iter_bytes():
                chunks.append(chunk)
                size += len(chunk)
                if size > max_bytes:
                    break
            return _read(r, chunks, size, max_bytes, url, what, raise_with)
    except (httpx.HTTPError, httpx.InvalidURL, httpcore.TimeoutException) as e:
        raise unreachable(e, url, what, total) from e


async def arequest(c: httpx.AsyncClient, method: str, url: str, *, what: str = "server",
                   timeout: float | None = None, max_bytes: int = MAX_BODY_BYTES, **kw: Any) -> httpx.Response:
    """`request()` for an async client built with deadline=True."""
    total = float(timeout if timeout is not None else (c.timeout.read or 10.0))
    url, kw = _userinfo_as_auth(url, kw)
    try:
        with deadline(total):
            async with c.stream(method, url, timeout=total, **kw) as r:
                chunks, size = [], 0
                async for chunk in r.aiter_bytes():
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > max_bytes:
                        break
                return _read(r, chunks, size, max_bytes, url, what)
    except (httpx.HTTPError, httpx.InvalidURL, httpcore.TimeoutException) as e:
        raise unreachable(e, url, what, total) from e


# --- errors -----------------------------------------------------------------------------------------

def _chain(e: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


def origin(url: str) -> str:
    """scheme://host:port, the port always written, no credentials: how a TLS peer is named."""
    try:
        u = httpx.URL(split_userinfo(url)[0])
        host = f"[{u.host}]" if ":" in u.host else u.host
        port = u.port or {"https": 443, "http": 80}.get(u.scheme)
        return f"{u.scheme}://{host}" + (f":{port}" if port else "")
    except Exception:  # noqa: BLE001  (a name for a message: never fail)
        return redact_url(url, hide_path=True)


def unreachable(e: BaseException, url: str, what: str = "server", timeout: float | None = None) -> ProbeError:
    """One line for a request that got no HTTP answer (TargetUnreachable, TlsError; BadUrl)."""
    shown = redact_url(url)
    base = f"{what} at {_base(shown)}"
    path = _path(shown)
    for c in _chain(e):
        if isinstance(c, ssl.SSLCertVerificationError):
            reason = c.verify_message or c.reason or str(c)
            return TlsError(f"TLS certificate of {origin(url)} not trusted: {reason}; {TLS_HINT}")
        if isinstance(c, ssl.SSLError):
            reason = c.reason or str(c)
            return TlsError(f"TLS handshake with {origin(url)} failed: {reason} (is it an HTTPS server?)")
    if isinstance(e, (httpx.TimeoutException, httpcore.TimeoutException)):
        within = f" within its {timeout:g}s deadline" if timeout else " in time"
        return TargetUnreachable(f"{base} did not answer {path}{within} (connect, headers and body)")
    if isinstance(e, httpx.InvalidURL) or isinstance(e, httpx.UnsupportedProtocol):
        return BadUrl(f"{shown!r} is not an http(s) URL: {redact_text(e)}")
    if isinstance(e, httpx.ConnectError):
        return TargetUnreachable(f"{base} is unreachable: {_os_reason(e) or 'connection refused or no route'}")
    detail = _os_reason(e) or redact_text(e)[:200] or "no detail"
    return TargetUnreachable(f"{base}: {type(e).__name__} on {path}: {detail}")


def _os_reason(e: BaseException) -> str | None:
    for c in _chain(e):
        if isinstance(c, OSError) and c.strerror:
            return c.strerror
    return None


def _base(url: str) -> str:
    m = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*://[^/?#]*)", url)
    return m.group(1) if m else url


def _path(url: str) -> str:
    rest = url[len(_base(url)):]
    return rest.split("?", 1)[0] or "/"


# --- URLs and secrets -------------------------------------------------------------------------------



def split_userinfo(url: str) -> tuple[str, BasicAuth | None]:
    """(the URL without `user:password@`, those credentials, percent-decoded)."""
    m = _SCHEME.match(url or "")
    if not m:
        return url, None
    scheme, netloc, rest = m.groups()
    userinfo, at, hostport = netloc.rpartition("@")
    if not at:
        return url, None
    user, _, password = userinfo.partition(":")
    return f"{scheme}{hostport}{rest}", BasicAuth(unquote(user), unquote(password))


def check_url(url: str, option: str = "URL") -> str:
    """The URL if it is http(s) with a host (credentials are left in: split them first)."""
    m = _SCHEME.match(url or "")
    scheme = m.group(1)[:-3].lower() if m else ""
    host = m.group(2).rpartition("@")[2] if m else ""
    if scheme not in ("http", "https") or not host or host.startswith(":"):
        raise BadUrl(f"{option} {redact_url(url)!r}: not an http(s) URL with a host (e.g. http://127.0.0.1:9090)")
    try:
        port = httpx.URL(split_userinfo(url)[0]).port
    except (httpx.InvalidURL, ValueError) as e:
        raise BadUrl(f"{option} {redact_url(url)!r}: not a valid URL ({e})") from None
    if port is not None and not 0 < port < 65536:
        raise BadUrl(f"{option} {redact_url(url)!r}: port {port} is out of range")
    return url
