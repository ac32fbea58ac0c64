"""Run the real `advisor` command line in a process of its own, as a user would, and judge how it failed.

In-process runners skip the entry point, which is where an escaped exception becomes exit 3 and a
signal becomes one line; bad-input tests therefore go through `python -m advisor.cli`'s own code,
in a child forked from a pre-imported zygote (tests/support/zygote.py: the same entry point without
an interpreter's start and the imports per command). ADVISOR_TEST_SUBPROCESS=1 runs each in a fresh
interpreter instead.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The environment before any test changed it: the zygote's own (each command gets the test's).
_BASE_ENV = {k: v for k, v in os.environ.items() if k != "ADVISOR_DEBUG"} | {"COLUMNS": "200"}


class _Zygote:
    """This test process's zygote, started on first use and kept for the session."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.support.zygote"], cwd=ROOT, env=_BASE_ENV,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.lock = threading.Lock()
        if json.loads(self.proc.stdout.readline() or "{}").get("ready") is not True:
            raise RuntimeError("the CLI zygote did not start")

    def run(self, args: list[str], env: dict[str, str], cwd: Path, timeout: float) -> tuple[int, str, str]:
        with self.lock, tempfile.TemporaryDirectory(prefix="advisor-cli-") as tmp:
            out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
            self.proc.stdin.write(json.dumps({"argv": args, "env": env, "cwd": str(cwd), "stdout": str(out),
                                              "stderr": str(err)}) + "\n")
            pid = json.loads(self.proc.stdout.readline())["pid"]
            killed = threading.Event()
            timers = [threading.Timer(timeout, _kill, (pid, killed, signal.SIGINT)),
                      threading.Timer(timeout + INTERRUPT_GRACE_S, _kill, (pid, killed, signal.SIGKILL))]
            for t in timers:
                t.start()
            try:
                code = json.loads(self.proc.stdout.readline())["code"]
            finally:
                for t in timers:
                    t.cancel()
            stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
            if killed.is_set():
                raise subprocess.TimeoutExpired(["advisor", *args], timeout, stdout, stderr)
            return code, stdout, stderr


# A command past its timeout is interrupted first, as a user would (Ctrl-C): an experiment then stops
# the engines it started and restores the baseline. Killed outright, it had left a candidate vLLM
# serving, which took a third of a core from every test after it.
INTERRUPT_GRACE_S = 120


def _kill(pid: int, killed: threading.Event, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)  # the zygote reaps it and answers
        killed.set()
    except ProcessLookupError:
        pass


_zygote: _Zygote | None = None


@dataclass
class Ran:
    argv: list[str]
    code: int
    stdout: str
    stderr: str

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.startswith(("error:", "internal error:"))]


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60, cwd: Path | None = None,
            data_dir: Path | None = None) -> Ran:
    """env is added to this process's environment; data_dir isolates the store and journals."""
    full = {**os.environ, "COLUMNS": "200", **(env or {})}
    full.pop("ADVISOR_DEBUG", None)
    if data_dir is not None:
        full["ADVISOR_DATA_DIR"] = str(data_dir)
    argv = [sys.executable, "-m", "advisor.cli", *args]
    if os.environ.get("ADVISOR_TEST_SUBPROCESS") == "1":
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=full, cwd=cwd or ROOT,
                           stdin=subprocess.DEVNULL)
        return Ran(argv, p.returncode, p.stdout, p.stderr)
    global _zygote
    if _zygote is None or _zygote.proc.poll() is not None:
        _zygote = _Zygote()
    code, stdout, stderr = _zygote.run(list(args), full, cwd or ROOT, timeout)
    return Ran(argv, code, stdout, stderr)


def assert_one_line_error(r: Ran, code: int = 2, contains: str | None = None, secrets: tuple[str, ...] = ()) -> str:
    """Exit `code`, exactly one error line (containing `contains`), no traceback, no secret anywhere."""
    where = f"{' '.join(r.argv[3:])!r}: exit {r.code}\nstdout: {r.stdout[-2000:]}\nstderr: {r.stderr[-2000:]}"
    assert r.code == code, where
    assert "Traceback" not in r.stdout + r.stderr, where
    assert len(r.error_lines) == 1, where
    line = r.error_lines[0]
    if contains is not None:
        assert contains in line, where
    for s in secrets:
        assert s not in r.stdout and s not in r.stderr, f"secret {s!r} shown; {where}"
    return line
