"""The dashboard's defences against strangers, in-process: request bodies over the limit refused
before authentication (the ASGI app driven directly, so that what it reads can be counted),
security headers on every response, ids outside the store's range answered 404, and control
characters from a target shown as visible escapes in every HTML page and report.
tests/integration/test_web_body_limit.py sends the large bodies to a real server."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from fastapi.testclient import TestClient

from advisor.reports import documents, html, views
from advisor.store import open_store
from advisor.web import api, create_app, pages
from advisor.web.context import MAX_ID
from tests.unit.test_store import make_diagnosis
from tests.unit.test_store_experiments import make_result
from tests.unit.test_web import AUTH, TOKEN, config, hostile_store

LIMIT = 4096
# C0 and C1 controls and DEL, except tab and newline (as advisor/escape.py shows them).
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
HOSTILE = "esc\x1b[31mred\x1b[0m bel\x07 nul\x00 cr\r csi\x9b31m del\x7f"


@pytest.fixture
def store_url(tmp_path) -> str:
    return hostile_store(tmp_path, HOSTILE)


def app_for(tmp_path, store_url, token=TOKEN, host="127.0.0.1", limit=LIMIT):
    return create_app(config(tmp_path), store_url=store_url, token=token, host=host, log_dir=tmp_path / "logs",
                      max_body_bytes=limit)


def client(tmp_path, store_url, **kw) -> TestClient:
    return TestClient(app_for(tmp_path, store_url, **kw), raise_server_exceptions=False, base_url="http://127.0.0.1")


# --- the body limit, before authentication ---------------------------------------------------


def scope(path: str, headers: list[tuple[bytes, bytes]]) -> dict:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
            "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
            "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"), *headers],
            "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8080), "state": {}}


def drive(app, path: str, headers: list[tuple[bytes, bytes]], chunk: bytes, chunks: int) -> tuple[list, int]:
    """POSTs `chunks` chunks to the ASGI app as a server would hand them over; returns the messages
    it sent and how many chunks it took."""
    sent: list[dict] = []
    taken = 0

    async def receive():
        nonlocal taken
        if taken >= chunks:
            await asyncio.sleep(3600)  # a client that is still sending
        taken += 1
        return {"type": "http.request", "body": chunk, "more_body": taken < chunks}

    async def send(message):
        sent.append(message)

    asyncio.run(asyncio.wait_for(app(scope(path, headers), receive, send), 30))
    return sent, taken


def answer(sent: list) -> tuple[int, dict, bytes]:
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, body


@pytest.mark.parametrize("path", ["/api/deployments/local/experiments", "/api/deployments/local/diagnoses", "/login"])
def test_a_declared_large_body_is_refused_without_reading_any_of_it(tmp_path, store_url, path):
    app = app_for(tmp_path, store_url)
    sent, taken = drive(app, path, [(b"content-length", str(300 * 2**20).encode())], b"x" * 65536, 4800)
    status, headers, body = answer(sent)
    assert (status, taken) == (413, 0), "answered from the Content-Length, before the token is checked"
    assert headers["connection"] == "close" and headers["x-frame-options"] == "DENY"
    detail = json.loads(body)["detail"]
    assert "\n" not in detail and f"over {LIMIT} bytes" in detail


def test_a_chunked_body_is_counted_and_refused_at_the_limit(tmp_path, store_url):
    app = app_for(tmp_path, store_url)
    chunk = b"x" * 1000
    sent, taken = drive(app, "/api/deployments/local/experiments", [(b"transfer-encoding", b"chunked")], chunk,
                        300_000)  # 300 MB, were it all taken
    status, headers, body = answer(sent)
    assert status == 413 and headers["connection"] == "close"
    assert taken == LIMIT // len(chunk) + 1, "it stops at the first chunk past the limit"
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"], "only the 413 goes out"


def test_a_body_within_the_limit_reaches_the_route(tmp_path, store_url):
    with client(tmp_path, store_url) as c:
        ok = c.post("/api/deployments/local/experiments/preview", json={"diagnosis_id": 1, "rank": 1,
                                                                        "value": "v" * 100}, headers=AUTH)
        assert ok.status_code != 413
        assert c.post("/api/deployments/local/experiments", json={"mechanism": "max_num_seqs"}).status_code == 401
        big = c.post("/api/deployments/local/experiments", content=b"{" + b" " * LIMIT + b"}", headers=AUTH)
        assert big.status_code == 413 and big.json()["detail"].startswith("request body over")


def test_an_unread_body_is_not_drained_after_the_answer(tmp_path, store_url):
    """The route answers 401 without reading the body: the connection closes rather than take in
    the rest."""
    app = app_for(tmp_path, store_url)
    sent, taken = drive(app, "/api/deployments/local/diagnoses", [(b"transfer-encoding", b"chunked")], b"x", 10**6)
    status, headers, _ = answer(sent)
    assert (status, taken) == (401, 0) and headers["connection"] == "close"


def test_the_limit_comes_from_the_settings(tmp_path, store_url, monkeypatch):
    from advisor.settings import Settings, SettingsError, get_settings

    assert Settings().max_body_bytes == 4 * 2**20
    monkeypatch.setenv("ADVISOR_MAX_BODY_BYTES", "2048")
    get_settings.cache_clear()
    try:
        assert create_app(config(tmp_path), store_url=store_url, token=TOKEN, log_dir=tmp_path).max_body_bytes == 2048
        monkeypatch.setenv("ADVISOR_MAX_BODY_BYTES", "4")
        get_settings.cache_clear()
        with pytest.raises(SettingsError, match="ADVISOR_MAX_BODY_BYTES"):
            get_settings()
    finally:
        get_settings.cache_clear()


# --- security headers -------------------------------------------------------------------------


def assert_hardened(r) -> str:
    """The headers every response carries; returns the CSP's script nonce."""
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["x-frame-options"] == "DENY"
    assert r.headers["referrer-policy"] == "no-referrer"
    csp = dict(d.strip().split(" ", 1) for d in r.headers["content-security-policy"].split(";"))
    assert csp["frame-ancestors"] == "'none'" and csp["default-src"] == "'none'"
    assert "unsafe" not in csp["script-src"], "scripts only with the nonce"
    nonce = re.fullmatch(r"'nonce-([A-Za-z0-9_-]{20,})'", csp["script-src"])
    assert nonce, csp["script-src"]
    assert r.headers.get_list("content-security-policy") == [r.headers["content-security-policy"]]
    return nonce.group(1)


def test_every_response_carries_the_security_headers(tmp_path, store_url, monkeypatch):
    with client(tmp_path, store_url) as c:
        for path in ("/", "/deployments/local", "/diagnoses/1", "/diagnoses/1/report.html", "/experiments/1",
                     "/experiments/1?fragment=1", "/rules", "/rules/ADV001", "/login", "/api/deployments",
                     "/api/diagnoses/1", "/openapi.json", "/nowhere", "/api/nowhere", "/diagnoses/999",
                     "/favicon.ico"):
            r = c.get(path)
            assert r.status_code in (200, 404), (path, r.status_code)
            assert_hardened(r)
        assert_hardened(c.post("/api/deployments/local/diagnoses"))  # 401
        assert_hardened(c.post("/api/deployments/local/diagnoses", headers={"Authorization": "Bearer no"}))  # 403
        assert_hardened(c.post("/api/deployments/local/experiments", content=b"x" * (LIMIT + 1)))  # 413
        assert_hardened(c.get("/api/deployments", headers={"Host": "evil.example"}))  # 400 from TrustedHost
        assert_hardened(c.get("/reports/weekly?since=3650d"))  # 422
    from advisor.store import Store

    def boom(*a, **k):
        raise RuntimeError("secret internals")

    monkeypatch.setattr(Store, "list_diagnoses", boom)
    with client(tmp_path, store_url) as c:
        for path in ("/", "/api/deployments"):
            r = c.get(path)
            assert r.status_code == 500 and "secret internals" not in r.text
            assert_hardened(r)  # sent by Starlette's outermost error handler, headers still on


def test_every_script_carries_this_responses_nonce(tmp_path, store_url):
    with open_store(store_url) as store:
        running = store.start_experiment("exp-2", "local", "http://h:1", "max_num_seqs", "8", {})
    with client(tmp_path, store_url) as c:
        seen = set()
        for path in ("/", "/deployments/local", "/diagnoses/1", f"/experiments/{running}", "/login"):
            r = c.get(path)
            nonce = assert_hardened(r)
            scripts = re.findall(r"<script[^>]*>", r.text)
            assert scripts, path
            assert all(s == f'<script nonce="{nonce}">' for s in scripts), (path, scripts)
            assert not re.search(r"\son[a-z]+\s*=|javascript:", r.text, re.I), "no inline handler a nonce cannot cover"
            seen.add(nonce)
        assert len(seen) == 5, "a fresh nonce per response"
        for path in ("/diagnoses/1/report.html", "/experiments/1/report.html"):
            assert "<script" not in c.get(path).text, "a downloaded report runs no script"


# --- ids in the store's range -----------------------------------------------------------------


def id_routes() -> list[str]:
    """Every route that takes an integer id in its path, with that id as {id}."""
    found = []
    for route in [*api.router.routes, *pages.router.routes]:
        ints = [p.name for p in route.dependant.path_params if p.field_info.annotation is int]
        if ints:
            assert "GET" in route.methods, route.path
            found.append(re.sub(r"\{(" + "|".join(ints) + r")\}", "{id}", route.path))
    return found


def test_ids_outside_the_stores_range_are_404_not_500(tmp_path, store_url):
    routes = id_routes()
    assert len(routes) == 7, routes
    with client(tmp_path, store_url) as c:
        for route in routes:
            assert c.get(route.format(id=1)).status_code == 200, route
            for bad in ("99999999999999999999999", str(MAX_ID + 1), "0", "-1", "-99999999999999999999999", "abc",
                        "1.5", str(MAX_ID)):
                r = c.get(route.format(id=bad))
                assert r.status_code == 404, (route, bad, r.status_code, r.text[:200])
                assert_hardened(r)
                if route.startswith("/api/"):
                    assert "\n" not in r.json()["detail"]
        r = c.post("/api/deployments/local/experiments/preview", json={"diagnosis_id": MAX_ID + 1, "rank": 1},
                   headers=AUTH)
        assert r.status_code == 422 and "diagnosis_id" in r.json()["detail"]


def test_ids_are_checked_after_the_token_beyond_loopback(tmp_path, store_url):
    with client(tmp_path, store_url, host="0.0.0.0") as c:
        assert c.get("/api/diagnoses/99999999999999999999999").status_code == 401
        assert c.get("/api/diagnoses/99999999999999999999999", headers=AUTH).status_code == 404


# --- control characters -----------------------------------------------------------------------


def strings(obj) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    values = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, list) else ()
    return [s for v in values for s in strings(v)]


def assert_controls_visible(page: str, where: str) -> None:
    assert not CONTROL.search(page), (where, CONTROL.findall(page)[:5])
    assert "\\x1b[31mred" in page and "\\x9b31m" in page and "\\x07" in page and "\\x00" in page, where


def test_control_characters_show_as_visible_escapes_on_every_page(tmp_path, store_url):
    with client(tmp_path, store_url) as c:
        for path in ("/", "/deployments/local", "/diagnoses/1", "/diagnoses/1/report.html", "/experiments/1",
                     "/experiments/1/report.html", "/experiments/1?fragment=1"):
            r = c.get(path)
            assert r.status_code == 200, path
            if path in ("/", "/deployments/local"):
                assert not CONTROL.search(r.text), path  # these pages show no model or label
                continue
            assert_controls_visible(r.text, path)
        for path in ("/api/diagnoses/1", "/api/experiments/1"):
            r = c.get(path)
            assert not CONTROL.search(r.text), path  # C0 as \\u escapes by json, DEL and C1 by SafeJSON
            assert any(HOSTILE in text for text in strings(r.json())), "the JSON still carries the text itself"


def test_html_reports_show_control_characters_as_escapes(tmp_path):
    d = make_diagnosis()
    d.model = HOSTILE
    d.findings[0].evidence[0].text = HOSTILE
    d.findings[0].evidence[0].source = HOSTILE
    d.findings[0].checks[0].reason = HOSTILE
    assert_controls_visible(documents.diagnosis_document(d, "html"), "diagnosis report")
    r = make_result()
    r.aborted, r.restore_note = HOSTILE, HOSTILE
    assert_controls_visible(html.render("experiment.html.j2", x=views.experiment_view(r)), "experiment report")
    # Markup is the advisor's own (the charts, tojson) and passes as it is.
    page = html.render("error.html.j2", status=500, message=HOSTILE)
    assert_controls_visible(page, "error page")
    assert "&lt;b&gt;" in html.render("error.html.j2", status=500, message="<b>")
