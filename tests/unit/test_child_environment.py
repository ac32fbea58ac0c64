"""No secret of the advisor reaches an engine it starts: the environment is built on purpose (every
ADVISOR_* variable and anything holding a secret's value removed, the spec's env kept), logs are
their owner's only, and the log lines quoted in an error are redacted. Checked on a real process
started through the local launcher, its environment read back from /proc."""

from __future__ import annotations

import sys

import psutil
import pytest

from advisor import child_env
from advisor.experiments.design.deployment import Deployment
from advisor.experiments.arms.journal import Journal
from advisor.experiments.arms.protocol import LaunchError
from advisor.experiments.arms.local import LocalLauncher
from advisor.experiments.arms.ownership import MARK_VARIABLE, Ownership
from advisor.settings import get_settings
from tests.support.servers import ROOT, free_port

SECRETS = {"ADVISOR_API_TOKEN": "api-token-0123456789", "ADVISOR_PROM_PASSWORD": "prom-password-0123",
           "ADVISOR_ENGINE_TOKEN": "engine-token-0123456789"}


@pytest.fixture
def secrets_set(monkeypatch):
    monkeypatch.chdir(ROOT)
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("PROM_PASS", SECRETS["ADVISOR_PROM_PASSWORD"])  # the user's own name for one of them
    monkeypatch.setenv("ADVISOR_DATA_DIR", "/nonexistent-but-not-secret")
    monkeypatch.setenv("KEEP_ME", "yes")
    # The settings are read once per process: cleared, so that neither these secrets nor an earlier
    # test's settings outlive the test (a later test would find ADVISOR_PROM_PASSWORD set).
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def spec(port: int, **local) -> Deployment:
    return Deployment.model_validate({
        "name": "fake", "engine": "vllm", "model": "fake", "launcher": "local",
        "local": {"command": [sys.executable, "-m", "tests.support.fake_openai"], "args": ["--max-num-seqs", "2"],
                  "port": port, "start_timeout_s": 20, "env": {"HF_TOKEN": "the-spec-gives-this"}, **local}})


def test_an_engine_started_by_an_experiment_gets_none_of_the_advisors_secrets(tmp_path, secrets_set):
    journal = Journal(tmp_path / "state")
    lau = LocalLauncher(spec(free_port()), ["--max-num-seqs", "8"], {}, journal, "e1", tmp_path / "logs")
    lau.bring_up("candidate")
    try:
        proc = psutil.Process(lau.started["candidate"].pid)
        env = proc.environ()
        leaked = {k for k, v in env.items() if k.startswith("ADVISOR_") and k != MARK_VARIABLE}
        assert not leaked, leaked
        assert not set(SECRETS.values()) & set(env.values())
        assert "PROM_PASS" not in env
        assert env["KEEP_ME"] == "yes" and env["HF_TOKEN"] == "the-spec-gives-this"
        assert env[MARK_VARIABLE] == Ownership(journal.path.parent).mark("e1")
        logs = list((tmp_path / "logs").iterdir())
        assert logs and all((p.stat().st_mode & 0o777) == 0o600 for p in logs)
        assert (journal.path.stat().st_mode & 0o777) == 0o600
        text = journal.path.read_text() + "".join(p.read_text() for p in logs)
        assert not any(v in text for v in SECRETS.values())
    finally:
        lau.take_down("candidate")


def test_the_log_lines_quoted_when_a_start_fails_are_redacted(tmp_path, secrets_set):
    """The user put a secret in the engine's own argv; the engine prints it and exits."""
    code = ("import sys; print('serving with --api-key', sys.argv[1]); "
            "print('upstream http://user:pw@10.0.0.1/v1'); sys.exit(3)")
    dep = spec(free_port(), command=[sys.executable, "-c", code], args=[SECRETS["ADVISOR_ENGINE_TOKEN"]])
    lau = LocalLauncher(dep, [SECRETS["ADVISOR_ENGINE_TOKEN"]], {}, Journal(tmp_path / "state"), "e2",
                        tmp_path / "logs")
    with pytest.raises(LaunchError) as e:
        lau.bring_up("candidate")
    msg = str(e.value)
    assert "exited with code 3" in msg and "serving with --api-key ***" in msg, msg
    assert SECRETS["ADVISOR_ENGINE_TOKEN"] not in msg and "user:pw" not in msg


def test_a_program_gone_since_the_spec_was_read_is_one_line(tmp_path, secrets_set):
    program = tmp_path / "engine"
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    dep = spec(free_port(), command=[str(program)])
    program.unlink()
    lau = LocalLauncher(dep, [], {}, Journal(tmp_path / "state"), "e3", tmp_path / "logs")
    with pytest.raises(LaunchError, match="program .* not found"):
        lau.bring_up("candidate")


def test_for_child_keeps_the_rest_and_the_extra_wins():
    env = child_env.for_child({"B": "spec"}, environ={"A": "1", "B": "inherited", "ADVISOR_X": "y",
                                                     "PYTHONPATH": "/x", "ADVISOR_API_TOKEN": "secret-1234",
                                                     "COPY": "secret-1234"})
    assert env == {"A": "1", "B": "spec"}


def test_short_values_are_not_treated_as_secrets_in_text(monkeypatch):
    monkeypatch.setenv("ADVISOR_API_TOKEN", "ab")
    assert child_env.redact("a b ab abc") == "a b ab abc"
    monkeypatch.setenv("ADVISOR_API_TOKEN", "tok-1234")
    assert child_env.redact("x tok-1234 y") == "x *** y"


def test_every_process_the_advisor_starts_is_given_an_environment_built_on_purpose():
    """A subprocess call without env= inherits the advisor's whole environment, secrets included (the
    demo's promtool did): every call in advisor/ names its environment. Read off the source, so a
    new call site is covered; the control proves the check sees a call without one."""
    import ast

    calls = {"run", "Popen", "call", "check_call", "check_output"}

    def bare(tree: ast.AST) -> list[int]:
        return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and n.func.attr in calls and isinstance(n.func.value, ast.Name) and n.func.value.id == "subprocess"
                and not any(k.arg == "env" for k in n.keywords)]

    assert bare(ast.parse("import subprocess\nsubprocess.run(['x'], text=True)\n")) == [2]
    found = {str(p.relative_to(ROOT)): bare(ast.parse(p.read_text()))
             for p in (ROOT / "advisor").rglob("*.py")}
    assert not {k: v for k, v in found.items() if v}, found
