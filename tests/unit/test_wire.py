"""The load generator's HTTP/1.1 hot path (advisor/loadgen/wire.py) against raw servers on
loopback: every body framing, keep-alive reuse and its one retry, credentials, TLS verification,
and answers that break the protocol."""

from __future__ import annotations

import asyncio
import socket
import threading
from contextlib import contextmanager

import pytest

from advisor.loadgen.wire import ConnectError, Pool, WireError
from probes.http import BearerAuth, HttpConfig
from tests.support.hostile import make_certs

SSE = b"data: {\"choices\": [{\"text\": \"a\"}]}\n\ndata: [DONE]\n\n"


@contextmanager
def raw_server(answer, tls=None, keep=True):
    """Answers every request on a connection with answer(request_bytes) -> bytes; closes after one
    request unless keep. Yields (url, requests seen, connections accepted)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    seen, conns = [], [0]
    stop = threading.Event()

    def handle(conn):
        if tls:
            try:
                conn = tls.wrap_socket(conn, server_side=True)
            except OSError:  # the client refused our certificate: what one test wants
                conn.close()
                return
        with conn:
            buf = b""
            while not stop.is_set():
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                buf += data
                head, sep, rest = buf.partition(b"\r\n\r\n")
                if not sep:
                    continue
                length = int([ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")][0])
                if len(rest) < length:
                    continue
                seen.append(head + sep + rest[:length])
                buf = rest[length:]
                conn.sendall(answer(seen[-1]))
                if not keep:
                    return

    def accept():
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                return
            conns[0] += 1
            threading.Thread(target=handle, args=(c,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    scheme = "https" if tls else "http"
    try:
        yield f"{scheme}://127.0.0.1:{srv.getsockname()[1]}", seen, conns
    finally:
        stop.set()
        srv.close()


def chunked(body: bytes, extra: bytes = b"") -> bytes:
    mid = len(body) // 2
    parts = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (body[:mid], body[mid:]) if p)
    return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n" + extra + b"\r\n" + parts + b"0\r\n\r\n"


def lines(url, cfg=HttpConfig(), n=1):
    async def go():
        pool = Pool(url, cfg)
        out = []
        for _ in range(n):
            async with pool.stream("/v1/completions", b'{"x": 1}') as r:
                out.append((r.status_code, [ln async for ln in r.aiter_lines()]))
        pool.close()
        return out

    return asyncio.run(go())


@pytest.mark.parametrize("framing", ["chunked", "length", "close"])
def test_every_body_framing_gives_the_same_lines(framing):
    if framing == "chunked":
        answer = chunked(SSE)
    elif framing == "length":
        answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(SSE), SSE)
    else:
        answer = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + SSE
    with raw_server(lambda req: answer, keep=framing != "close") as (url, seen, _):
        [(status, got)] = lines(url)
    assert status == 200 and got == ['data: {"choices": [{"text": "a"}]}', "", "data: [DONE]", ""]
    head = seen[0].split(b"\r\n\r\n")[0]
    assert head.startswith(b"POST /v1/completions HTTP/1.1") and b"Content-Length: 8" in head
    assert seen[0].endswith(b'{"x": 1}')


def test_keep_alive_reuses_one_connection_and_retries_a_closed_one_once():
    with raw_server(lambda req: chunked(SSE)) as (url, seen, conns):
        assert [s for s, _ in lines(url, n=5)] == [200] * 5
        assert conns[0] == 1 and len(seen) == 5
    # a server that closes after every answer without saying so: the reused connection fails
    # before any answer byte, and the request goes once more on a new connection
    with raw_server(lambda req: chunked(SSE), keep=False) as (url, seen, conns):
        assert [s for s, _ in lines(url, n=3)] == [200] * 3
        assert conns[0] >= 3 and len(seen) == 3


def test_credentials_and_base_path_are_sent():
    with raw_server(lambda req: chunked(SSE)) as (url, seen, _):
        lines(url + "/prefix/", HttpConfig(auth=BearerAuth("s3cret")))
    head = seen[0].split(b"\r\n\r\n")[0]
    assert head.startswith(b"POST /prefix/v1/completions HTTP/1.1") and b"Authorization: Bearer s3cret" in head


def test_tls_is_verified_against_the_ca_given(tmp_path):
    certs = make_certs(tmp_path)
    with raw_server(lambda req: chunked(SSE), tls=certs.server_context) as (url, _, _):
        [(status, _)] = lines(url, HttpConfig(ca_bundle=certs.ca_pem))
        assert status == 200
        with pytest.raises(ConnectError, match="TLS handshake failed"):
            lines(url, HttpConfig())  # the default trust store does not know this CA
        # the explicit opt-out (--insecure) is honoured too: the same untrusted server answers
        [(status, _)] = lines(url, HttpConfig(verify=False))
        assert status == 200


@pytest.mark.parametrize("answer, message", [
    (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP answer"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", "before the announced Content-Length"),
])
def test_answers_that_break_the_protocol_are_errors(answer, message):
    with raw_server(lambda req: answer, keep=False) as (url, _, _):
        with pytest.raises(WireError, match=message):
            lines(url)


def test_an_endless_line_is_cut():
    big = b"data: " + b"x" * (2 << 20)
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(big), big)
    with raw_server(lambda req: answer, keep=False) as (url, _, _):
        with pytest.raises(WireError, match="ran past"):
            lines(url)


def test_a_refused_connection_is_a_connect_error():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(ConnectError):
        lines(f"http://127.0.0.1:{port}")
