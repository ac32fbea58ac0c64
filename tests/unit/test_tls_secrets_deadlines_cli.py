"""The real command line against crafted servers on 127.0.0.1 (issue 8: TLS, secrets, request
deadlines): a self-signed HTTPS Prometheus is refused by default and accepted with --ca-bundle or
--insecure (which warns); servers that dribble their headers or body end `advisor probe` (both
modes) and `advisor load` within the request deadline with one line; a password in a URL appears
nowhere: not in stdout, stderr, or the store."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest
import yaml

from tests.support.cli import assert_one_line_error, run_cli
from tests.support.hostile import dribbling_server, endless_server, make_certs, prom_stand_in
from tests.support.servers import free_port

TIMEOUT = 2  # ADVISOR_TIMEOUT: each request's total deadline
# Python start-up and imports on a slow 2-core machine, plus the deadline, plus slack: far below
# what a dribbling server would take (hours) and below the commands' budgets (6 x timeout + 10 s).
WALL_LIMIT_S = TIMEOUT + 12
SECRET = "s3cret-pa55"


def with_secret(url: str, user: str = "admin") -> str:
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{user}:{SECRET}@{rest}"


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture
def certs(tmp_path):
    return make_certs(tmp_path)


# --- TLS --------------------------------------------------------------------------------------------

def test_self_signed_prometheus_is_refused_by_default(certs):
    with prom_stand_in(tls=certs) as prom:
        r = run_cli("probe", "--prom-url", prom.url)
    line = assert_one_line_error(r, 2, contains=f"TLS certificate of {prom.url} not trusted")
    assert line.endswith("give --ca-bundle or --insecure")
    assert prom.paths == []


def test_ca_bundle_option_and_setting_are_accepted(certs):
    with prom_stand_in(tls=certs) as prom:
        by_option = run_cli("--ca-bundle", str(certs.ca_pem), "probe", "--prom-url", prom.url, "-o", "json")
        by_setting = run_cli("probe", "--prom-url", prom.url, "-o", "json",
                             env={"ADVISOR_CA_BUNDLE": str(certs.ca_pem)})
    for r in (by_option, by_setting):
        assert r.code == 0, r.stderr
        assert json.loads(r.stdout)["signals"]["requests_running_avg"]["value"] == 2
        assert "warning" not in r.stderr


@pytest.mark.parametrize("how", ["option", "setting"])
def test_the_opt_out_is_accepted_and_warns(certs, how):
    with prom_stand_in(tls=certs) as prom:
        if how == "option":
            r = run_cli("--insecure", "probe", "--prom-url", prom.url, "-o", "json")
        else:
            r = run_cli("probe", "--prom-url", prom.url, "-o", "json", env={"ADVISOR_TLS_VERIFY": "false"})
    assert r.code == 0, r.stderr
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning: TLS certificates are not verified")]
    assert len(warnings) == 1
    assert ("--insecure" if how == "option" else "ADVISOR_TLS_VERIFY=false") in warnings[0]


def test_the_opt_out_warns_even_when_the_command_fails():
    r = run_cli("--insecure", "probe", "--prom-url", f"http://127.0.0.1:{free_port()}")
    assert_one_line_error(r, 2, contains="unreachable")
    assert "warning: TLS certificates are not verified (--insecure)" in r.stderr


def test_an_unusable_ca_bundle_is_one_line(tmp_path):
    junk = tmp_path / "junk.pem"
    junk.write_bytes(b"\xff\xfe not a certificate")
    r = run_cli("--ca-bundle", str(junk), "probe", "--prom-url", "https://127.0.0.1:1")
    assert_one_line_error(r, 2, contains="CA bundle")


# --- deadlines --------------------------------------------------------------------------------------

def workload_file(tmp_path: Path) -> Path:
    path = tmp_path / "workload.yaml"
    path.write_text(yaml.safe_dump({
        "name": "tiny", "buckets": [{"name": "short", "prompt_tokens": [10, 20], "output_tokens": [4, 8]}],
        "arrival": {"kind": "poisson", "rate": 1.0}, "duration_s": 5, "seed": 1}))
    return path


COMMANDS = {
    "probe --prom-url": lambda url, tmp: ["probe", "--prom-url", url],
    "probe --url": lambda url, tmp: ["probe", "--url", url, "--window", "2s"],
    "load (model lookup)": lambda url, tmp: ["load", "--target", url, "--workload", str(workload_file(tmp))],
    "load (prompt sizing)": lambda url, tmp: ["load", "--target", url, "--workload", str(workload_file(tmp)),
                                              "--model", "m"],
    "load --from-prom": lambda url, tmp: ["load", "--target", "http://127.0.0.1:1", "--from-prom", url,
                                          "--model", "m"],
}


@pytest.mark.parametrize("where", ["headers", "body"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_dribbling_server_ends_within_the_deadline(tmp_path, command, where):
    with dribbling_server(where) as url:
        t = time.monotonic()
        r = run_cli(*COMMANDS[command](with_secret(url), tmp_path), env={"ADVISOR_TIMEOUT": str(TIMEOUT)},
                    timeout=60)
        took = time.monotonic() - t
    line = assert_one_line_error(r, 2, contains=f"within its {TIMEOUT}s deadline", secrets=(SECRET,))
    assert url in line
    assert took < WALL_LIMIT_S, f"{command}: {took:.1f}s"


def test_an_endless_body_ends_at_the_size_limit():
    with endless_server() as url:
        t = time.monotonic()
        r = run_cli("probe", "--url", url, "--window", "2s", timeout=60)
        took = time.monotonic() - t
    assert_one_line_error(r, 2, contains="with more than 64 MiB")
    assert took < WALL_LIMIT_S


# --- secrets ----------------------------------------------------------------------------------------

def store_bytes(data_dir: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(data_dir.rglob("*")) if p.is_file())


@pytest.mark.parametrize("output", ["text", "json", "markdown"])
def test_a_password_in_the_url_is_used_but_never_shown_or_stored(tmp_path, output):
    data = tmp_path / "data"
    with prom_stand_in(require_auth=basic("admin", SECRET)) as prom:
        r = run_cli("--verbose", "diagnose", "--prom-url", with_secret(prom.url), "--save", "-o", output,
                    data_dir=data)
    assert r.code in (0, 1), r.stderr
    assert "saved as diagnosis" in r.stderr
    assert SECRET not in r.stdout + r.stderr and "admin:" not in r.stdout + r.stderr
    assert set(prom.authorization) == {basic("admin", SECRET)}  # every request carried the credentials
    stored = store_bytes(data)
    assert stored and prom.url.split("://")[1].encode() in stored
    assert SECRET.encode() not in stored and b"admin:" not in stored
    if output == "json":
        assert json.loads(r.stdout)["target"] == prom.url


def test_credentials_from_a_file_are_sent(tmp_path):
    secret_file = tmp_path / "prom-password"
    secret_file.write_text(SECRET + "\n")
    with prom_stand_in(require_auth=basic("reader", SECRET)) as prom:
        r = run_cli("probe", "--prom-url", prom.url, "-o", "json",
                    env={"ADVISOR_PROM_USER": "reader", "ADVISOR_PROM_PASSWORD_FILE": str(secret_file)})
    assert r.code == 0, r.stderr
    assert SECRET not in r.stdout + r.stderr


def test_a_bearer_token_from_the_environment_is_sent():
    with prom_stand_in(require_auth="Bearer t0ken-xyz") as prom:
        r = run_cli("probe", "--prom-url", prom.url, "-o", "json", env={"ADVISOR_PROM_TOKEN": "t0ken-xyz"})
        refused = run_cli("probe", "--prom-url", prom.url)
    assert r.code == 0, r.stderr
    assert "t0ken-xyz" not in r.stdout + r.stderr
    assert_one_line_error(refused, 2, contains="wants credentials")


@pytest.mark.parametrize("argv", [
    ["probe", "--prom-url"], ["probe", "--url"], ["diagnose", "--prom-url"],
    ["load", "--workload", "WORKLOAD", "--target"],
])
def test_error_lines_never_show_the_password(tmp_path, argv):
    url = with_secret(f"http://127.0.0.1:{free_port()}")
    argv = [str(workload_file(tmp_path)) if a == "WORKLOAD" else a for a in argv]
    r = run_cli("--verbose", *argv, url, data_dir=tmp_path / "data")
    line = assert_one_line_error(r, 2, secrets=(SECRET, "admin:"))
    assert "unreachable" in line or "/v1/models" in line
