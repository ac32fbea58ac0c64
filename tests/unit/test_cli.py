"""The command line: help on every option, and bad input as one clear line with exit code 2."""

import socket

import pytest
from typer.testing import CliRunner

from advisor.cli import app

runner = CliRunner()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(*args):
    return runner.invoke(app, list(args))


@pytest.mark.parametrize("command, options", [
    ("probe", ["--prom-url", "--url", "--window", "--model", "--at", "--engine", "--output", "--all"]),
    ("diagnose", ["--prom-url", "--url", "--window", "--model", "--slo", "--rules-config", "--output", "--save"]),
])
def test_help_explains_every_option(command, options):
    r = run(command, "--help")
    assert r.exit_code == 0
    for opt in options:
        assert opt in r.output
    assert "Exit codes" in r.output


@pytest.fixture
def broken_environment(monkeypatch):
    from advisor.settings import get_settings

    monkeypatch.setenv("ADVISOR_TIMEOUT", "soon")
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.mark.parametrize("args, usage", [
    (["diagnose", "--help"], "Usage: advisor diagnose"),
    (["report", "diagnosis", "--help"], "Usage: advisor report diagnosis"),
    (["report", "--help"], "Usage: advisor report"),
    (["report"], "Usage: advisor report"),
])
def test_help_needs_no_settings(broken_environment, args, usage):
    """Help is read before the settings: it shows when the environment is what the user came to fix."""
    r = runner.invoke(app, args, prog_name="advisor")
    assert r.exit_code in (0, 2) and usage in r.output  # a group without its command: help, exit 2
    assert "environment variable ADVISOR_TIMEOUT" not in r.output


@pytest.mark.parametrize("args", [
    ["report", "diagnosis", "1"],
    ["diagnose", "--slo", "--help"],  # an --slo path named --help, as click reads it: not a help request
])
def test_commands_still_read_the_settings_first(broken_environment, args):
    from advisor.settings import SettingsError

    r = runner.invoke(app, args, prog_name="advisor")  # main() turns the error into one line and exit 2
    assert isinstance(r.exception, SettingsError) and "ADVISOR_TIMEOUT" in str(r.exception)
    assert "Usage:" not in r.output


@pytest.mark.parametrize("args, message", [
    (["probe"], "give exactly one of --prom-url"),
    (["probe", "--url", "http://a", "--prom-url", "http://b"], "give exactly one of --prom-url"),
    (["probe", "--url", "http://127.0.0.1:9", "--window", "soon"], "not a duration: 'soon'"),
    (["probe", "--url", "http://127.0.0.1:9", "--at", "2026-01-01T00:00:00Z"], "--at needs --prom-url"),
    (["probe", "--prom-url", "http://127.0.0.1:9", "--at", "yesterday"], "not a time"),
    (["probe", "--url", "http://127.0.0.1:9", "--engine", "nope"], None),
])
def test_bad_arguments_exit_2(args, message):
    r = run(*args)
    assert r.exit_code == 2
    if message:
        assert message in r.output
    assert "Traceback" not in r.output


def test_unreachable_engine_is_one_line():
    r = run("probe", "--url", f"http://127.0.0.1:{closed_port()}", "--window", "1s")
    assert r.exit_code == 2
    assert "unreachable" in r.output and "Traceback" not in r.output


def test_unreachable_prometheus_is_one_line():
    r = run("diagnose", "--prom-url", f"http://127.0.0.1:{closed_port()}")
    assert r.exit_code == 2
    assert "Prometheus at" in r.output and "unreachable" in r.output


def test_bad_slo_file_exits_2_before_probing(tmp_path):
    slo = tmp_path / "slo.yaml"
    slo.write_text("ttft_p95: fast\n")
    r = run("diagnose", "--prom-url", f"http://127.0.0.1:{closed_port()}", "--slo", str(slo))
    assert r.exit_code == 2
    assert "slo.yaml: field ttft_p95" in r.output


def test_bad_rules_config_exits_2(tmp_path):
    cfg = tmp_path / "rules.yaml"
    cfg.write_text("ADV404: {enabled: false}\n")
    r = run("diagnose", "--prom-url", "http://127.0.0.1:9", "--rules-config", str(cfg))
    assert r.exit_code == 2
    assert "rules.yaml: field ADV404: unknown rule" in r.output


def test_every_rule_has_a_help_page():
    from advisor.diagnosis import load_rules

    listed = run("rules", "list")
    assert listed.exit_code == 0
    for rule in load_rules():
        assert rule.id in listed.output
        page = run("rules", "show", rule.id)
        assert page.exit_code == 0
        for heading in ("What it detects", "Evidence", "What to change", "Checks", "Thresholds"):
            assert heading in page.output, (rule.id, heading)


def test_unknown_rule_page():
    r = run("rules", "show", "ADV404")
    assert r.exit_code == 2 and "no rule 'ADV404'" in r.output
