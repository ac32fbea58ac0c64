"""The entry point's exit codes: the advisor's own errors are one line and exit 2, anything else is
a bug: one line, exit 3, and its traceback only with --debug."""

from __future__ import annotations

import sys

import pytest

import advisor.cli.probe as probe_cmd
from advisor.cli import main
from advisor.errors import AdvisorError


def run_main(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["advisor", *args])
    with pytest.raises(SystemExit) as e:
        main()
    return e.value.code, capsys.readouterr().err


@pytest.fixture
def probe_raises(monkeypatch):
    def set_error(exc: BaseException) -> None:
        def boom(*a, **k):
            raise exc
        monkeypatch.setattr(probe_cmd, "take_snapshot", boom)
    return set_error


def test_a_bug_exits_3_with_one_line_and_a_hint(monkeypatch, capsys, probe_raises):
    probe_raises(KeyError("signals"))
    code, err = run_main(monkeypatch, capsys, "probe", "--url", "http://127.0.0.1:9")
    assert code == 3
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert lines[0].startswith("internal error: KeyError") and "--debug" in lines[0]


def test_debug_shows_the_traceback(monkeypatch, capsys, probe_raises):
    probe_raises(KeyError("signals"))
    monkeypatch.setattr(sys, "argv", ["advisor", "--debug", "probe", "--url", "http://127.0.0.1:9"])
    with pytest.raises(KeyError):
        main()


def test_an_advisor_error_that_escapes_is_one_line_exit_2(monkeypatch, capsys, probe_raises):
    probe_raises(AdvisorError("the [/x] target said \x1b[31mno"))
    code, err = run_main(monkeypatch, capsys, "probe", "--url", "http://127.0.0.1:9")
    assert code == 2
    assert err.strip().splitlines() == ["error: the [/x] target said \\x1b[31mno"]


def test_a_usage_error_is_exit_2(monkeypatch, capsys):
    code, err = run_main(monkeypatch, capsys, "probe", "--no-such-option")
    assert code == 2 and "No such option" in err
