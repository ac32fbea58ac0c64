"""The advisor's one HTTP stack (probes/http.py, advisor/net.py) against real servers on 127.0.0.1:
a total deadline that dribbling servers cannot stretch, verified TLS with a CA bundle or an explicit
opt-out, credentials sent but never shown, and URL redaction."""

from __future__ import annotations

import asyncio
import base64
import time
from urllib.parse import quote

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advisor import net
from advisor.settings import get_settings
from probes import TargetUnreachable, probe_prometheus
from probes import http as h
from probes.prometheus import PrometheusClient
from tests.support.hostile import dribbling_server, endless_server, make_certs, prom_stand_in
from tests.support.servers import free_port

DEADLINE = 1.5


@pytest.fixture
def settings_env(monkeypatch):
    """Set ADVISOR_ variables for one test, with the settings cache and CLI options cleared."""
    def set_env(**values):
        for k, v in values.items():
            monkeypatch.setenv(f"ADVISOR_{k.upper()}", str(v))
        get_settings.cache_clear()

    get_settings.cache_clear()
    net.set_tls_options()
    yield set_env
    get_settings.cache_clear()
    net.set_tls_options()
    net._by_origin.clear()


# --- the total deadline -------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["headers", "body"])
def test_a_dribbling_server_ends_at_the_total_deadline(where):
    with dribbling_server(where) as url, h.client(h.HttpConfig(timeout=DEADLINE)) as c:
        t = time.monotonic()
        with pytest.raises(TargetUnreachable, match=r"did not answer /x within its 1.5s deadline") as e:
            h.request(c, "GET", url + "/x", what="engine")
        took = time.monotonic() - t
    assert DEADLINE - 0.1 <= took < DEADLINE + 1.0, took
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("where", ["headers", "body"])
def test_the_async_client_keeps_the_same_deadline(where):
    async def go(url):
        async with h.async_client(h.HttpConfig(timeout=DEADLINE)) as c:
            return await h.arequest(c, "GET", url + "/x")

    with dribbling_server(where) as url:
        t = time.monotonic()
        with pytest.raises(TargetUnreachable, match="deadline"):
            asyncio.run(go(url))
    assert time.monotonic() - t < DEADLINE + 1.0


def test_without_the_deadline_each_read_alone_would_pass():
    """The servers above really dribble within httpx's own per-read timeout: a plain client (per
    read 1.5s) is still reading after two deadlines."""
    with dribbling_server("body") as url, httpx.Client(timeout=DEADLINE) as c:
        t = time.monotonic()
        with c.stream("GET", url + "/x") as r:
            for _ in r.iter_bytes():
                if time.monotonic() - t > 2 * DEADLINE:
                    break
        assert time.monotonic() - t > 2 * DEADLINE


def test_the_deadline_backend_is_installed_on_every_transport():
    c = h.client(h.HttpConfig(), proxy="http://127.0.0.1:9")
    pools = [t._pool for t in [c._transport, *c._mounts.values()] if t is not None]
    assert pools and all(isinstance(p._network_backend, h._Backend) for p in pools)
    a = h.async_client(h.HttpConfig(), deadline=False)
    assert not isinstance(a._transport._pool._network_backend, h._AsyncBackend)


def test_a_fast_server_is_unaffected_and_connections_are_reused():
    with prom_stand_in() as prom, h.client(h.HttpConfig(timeout=DEADLINE)) as c:
        for _ in range(3):
            assert h.request(c, "GET", prom.url + "/api/v1/label/__name__/values").status_code == 200
            time.sleep(0.05)


def test_an_endless_body_is_cut_at_the_size_limit():
    with endless_server() as url, h.client(h.HttpConfig(timeout=10)) as c:
        t = time.monotonic()
        with pytest.raises(h.TooLarge, match=r"answered /metrics with more than 1 MiB"):
            h.request(c, "GET", url + "/metrics", what="engine", max_bytes=1024 * 1024)
    assert time.monotonic() - t < 5


def test_a_compressed_answer_reads_as_its_text():
    import gzip

    body = b'{"status": "success", "data": ["a"]}'

    def handler(request):
        return httpx.Response(200, headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
                              content=gzip.compress(body))

    with h.client(h.HttpConfig(), transport=httpx.MockTransport(handler)) as c:
        r = h.request(c, "GET", "http://prom/api/v1/label/__name__/values")
    assert r.json()["data"] == ["a"] and r.reason_phrase == "OK"


def test_connection_refused_is_one_line():
    with h.client(h.HttpConfig(timeout=2)) as c:
        with pytest.raises(TargetUnreachable, match=r"^engine at http://127.0.0.1:\d+ is unreachable: "):
            h.request(c, "GET", f"http://127.0.0.1:{free_port()}/metrics", what="engine")


# --- TLS --------------------------------------------------------------------------------------------

def test_a_self_signed_certificate_is_refused_by_default(tmp_path):
    certs = make_certs(tmp_path)
    with prom_stand_in(tls=certs) as prom:
        with pytest.raises(h.TlsError) as e:
            probe_prometheus(prom.url, window_s=60, timeout=5)
    port = prom.url.rsplit(":", 1)[1]
    msg = str(e.value)
    assert msg.startswith(f"TLS certificate of https://127.0.0.1:{port} not trusted: ")
    assert msg.endswith("; give --ca-bundle or --insecure")
    assert prom.paths == []  # nothing was sent, the credentials included


def test_the_ca_bundle_or_the_opt_out_is_accepted(tmp_path):
    certs = make_certs(tmp_path)
    with prom_stand_in(tls=certs) as prom:
        snap = probe_prometheus(prom.url, window_s=60, timeout=5, http=h.HttpConfig(ca_bundle=certs.ca_pem))
        assert snap.signals["requests_running_avg"].value == 2
        # The explicit opt-out under test: a self-signed stand-in on 127.0.0.1, nothing else reached.
        snap = probe_prometheus(prom.url, window_s=60, timeout=5, http=h.HttpConfig(verify=False))
        assert snap.signals["requests_running_avg"].value == 2


def test_a_certificate_for_another_host_is_refused(tmp_path):
    certs = make_certs(tmp_path, host="prometheus.example")
    with prom_stand_in(tls=certs) as prom:
        with pytest.raises(h.TlsError, match="not trusted: .*(mismatch|not valid for|match)"):
            probe_prometheus(prom.url, window_s=60, timeout=5, http=h.HttpConfig(ca_bundle=certs.ca_pem))


def test_https_to_a_plain_http_server_is_one_line():
    with prom_stand_in() as prom:
        url = prom.url.replace("http://", "https://")
        with pytest.raises(h.TlsError, match="TLS handshake with https://127.0.0.1:\\d+ failed"):
            probe_prometheus(url, window_s=60, timeout=5)


def test_a_bad_ca_bundle_is_one_line(tmp_path):
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(h.TlsConfigError, match="holds no usable PEM certificate"):
        h.ssl_context(h.HttpConfig(ca_bundle=junk))
    with pytest.raises(h.TlsConfigError, match="no such file"):
        h.ssl_context(h.HttpConfig(ca_bundle=tmp_path / "missing.pem"))


def test_settings_and_options_choose_verification(settings_env, tmp_path):
    settings_env()
    assert net.config("prom").verify is True and net.insecure_warning() is None
    settings_env(tls_verify="false", ca_bundle=tmp_path / "ca.pem")
    assert net.config("prom").verify is False
    assert "ADVISOR_TLS_VERIFY=false" in net.insecure_warning()
    settings_env(tls_verify="true")
    net.set_tls_options(insecure=True)
    assert net.config("engine").verify is False and "--insecure" in net.insecure_warning()
    net.set_tls_options(ca_bundle=tmp_path / "other.pem")
    assert net.config("engine").ca_bundle == tmp_path / "other.pem"


# --- credentials ------------------------------------------------------------------------------------

def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_userinfo_is_sent_as_basic_auth_and_never_shown():
    with prom_stand_in(require_auth=basic("ad min", "s3cret")) as prom:
        url = prom.url.replace("http://", "http://ad%20min:s3cret@")
        snap = probe_prometheus(url, window_s=60, timeout=5)
    assert snap.target == prom.url and "s3cret" not in snap.to_json()
    assert set(prom.authorization) == {basic("ad min", "s3cret")}


def test_errors_never_show_the_password():
    url = f"http://admin:s3cret@127.0.0.1:{free_port()}"
    with pytest.raises(TargetUnreachable) as e:
        probe_prometheus(url, window_s=60, timeout=2)
    assert "s3cret" not in str(e.value) and "admin" not in str(e.value)


def test_a_401_says_credentials_are_wanted():
    with prom_stand_in(require_auth="Bearer t0ken") as prom:
        with pytest.raises(Exception, match="wants credentials"):
            probe_prometheus(prom.url, window_s=60, timeout=5)
        snap = probe_prometheus(prom.url, window_s=60, timeout=5, http=h.HttpConfig(auth=h.BearerAuth("t0ken")))
    assert snap.signals["requests_running_avg"].value == 2


def test_credentials_from_the_environment_and_files(settings_env, tmp_path):
    secret = tmp_path / "password"
    secret.write_text("fr0m-file\n")
    settings_env(prom_user="u", prom_password_file=secret)
    assert net.config("prom").auth == h.BasicAuth("u", "fr0m-file")
    assert net.config("engine").auth is None
    token = tmp_path / "token"
    token.write_text("t0k\n")
    settings_env(engine_token_file=token)
    assert net.config("engine").auth == h.BearerAuth("t0k")
    assert "t0k" not in repr(net.config("engine")) and "fr0m-file" not in repr(net.config("prom"))


def test_two_passwords_are_one_line(settings_env, tmp_path):
    settings_env(prom_user="u", prom_password="a", prom_password_file=tmp_path / "p")
    with pytest.raises(net.CredentialsError, match="ADVISOR_PROM_PASSWORD or ADVISOR_PROM_PASSWORD_FILE, not both"):
        net.config("prom")


def test_a_token_and_a_user_are_one_line(settings_env):
    settings_env(engine_user="u", engine_token="t")
    with pytest.raises(net.CredentialsError, match="bearer token .* or basic auth .*, not both"):
        net.config("engine")


def test_unreadable_password_file(settings_env, tmp_path):
    settings_env(engine_user="u", engine_password_file=tmp_path / "missing")
    with pytest.raises(net.CredentialsError, match="ADVISOR_ENGINE_PASSWORD_FILE .*cannot read"):
        net.config("engine")


def test_url_credentials_win_and_follow_their_origin_only(settings_env):
    settings_env(prom_token="env-token")
    clean, cfg = net.target("http://u:p@127.0.0.1:9090/", "prom", "--prom-url")
    assert clean == "http://127.0.0.1:9090" and cfg.auth == h.BasicAuth("u", "p")
    assert net.config("prom", url="http://127.0.0.1:9090/api").auth == h.BasicAuth("u", "p")
    assert net.config("prom", url="http://127.0.0.1:9091").auth == h.BearerAuth("env-token")


def test_a_bad_url_is_one_line():
    for bad in ("127.0.0.1:9090", "ftp://x", "http://", "http://h:99999"):
        with pytest.raises(h.BadUrl):
            net.target(bad, "prom", "--prom-url")


def test_prometheus_client_counts_and_closes():
    with prom_stand_in() as prom:
        with PrometheusClient(prom.url, timeout=5) as c:
            assert c.metric_names() == {"vllm:num_requests_running", "vllm:num_requests_waiting"}
            assert c.query("up", None) and c.queries == 2


# --- redaction --------------------------------------------------------------------------------------

@pytest.mark.parametrize("url, shown", [
    ("http://u:p@h:1/x?y=1", "http://***@h:1/x?y=1"),
    ("https://token@h", "https://***@h"),
    ("http://u:p@ss@h/", "http://***@h/"),
    ("http://h:1/path", "http://h:1/path"),
    ("not a url", "not a url"),
    ("", ""),
])
def test_redact_url(url, shown):
    assert h.redact_url(url) == shown


def test_redact_url_can_hide_a_secret_path():
    assert h.redact_url("https://hooks.slack.com/services/T0/B0/XYZ", hide_path=True) == "https://hooks.slack.com/***"
    assert h.redact_url("https://u:p@h", hide_path=True) == "https://***@h"


def test_redact_text_keeps_json_intact():
    import json

    doc = json.dumps({"target": "http://u:s3cret@h:1", "mail": "a@b", "x": "https://t@h/p"}, separators=(",", ":"))
    out = h.redact_text(doc)
    assert "s3cret" not in out and json.loads(out)["mail"] == "a@b"
    assert json.loads(out)["x"] == "https://***@h/p"


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_redaction_and_splitting_never_raise(text):
    for s in (text, "http://" + text, f"https://{text}@h/{text}"):
        assert isinstance(h.redact_url(s), str) and isinstance(h.redact_url(s, hide_path=True), str)
        assert isinstance(h.redact_text(s), str) and isinstance(h.origin(s), str)
        clean, auth = h.split_userinfo(s)
        assert isinstance(clean, str)


@settings(max_examples=300, deadline=None)
@given(user=st.text(min_size=1, max_size=20), password=st.text(min_size=1, max_size=20),
       path=st.sampled_from(["", "/", "/api/v1", "/x?y=1#z"]))
def test_a_password_never_survives(user, password, path):
    secret = "PW" + quote(password, safe="")
    url = f"https://{quote(user, safe='')}:{secret}@127.0.0.1:9090{path}"
    for shown in (h.redact_url(url), h.redact_text(f"error: {url} failed"), h.split_userinfo(url)[0]):
        assert secret not in shown
    clean, auth = h.split_userinfo(url)
    assert clean == f"https://127.0.0.1:9090{path}"
    assert auth == h.BasicAuth(user, "PW" + password)


def test_userinfo_left_in_a_url_is_sent_but_not_logged(caplog):
    import logging

    with prom_stand_in(require_auth=basic("dep", "fr0m-yaml")) as prom, h.client(h.HttpConfig(timeout=5)) as c:
        with caplog.at_level(logging.DEBUG):
            r = h.request(c, "GET", prom.url.replace("http://", "http://dep:fr0m-yaml@") + "/api/v1/query")
    assert r.status_code == 200
    assert "fr0m-yaml" not in caplog.text and "HTTP Request: GET" in caplog.text
