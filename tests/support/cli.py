"""Run the real `advisor` command line in a subprocess, as a user would, and judge how it failed.

In-process runners skip the entry point, which is where an escaped exception becomes exit 3 and a
signal becomes one line; bad-input tests therefore go through `python -m advisor.cli`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=full, cwd=cwd or ROOT,
                       stdin=subprocess.DEVNULL)
    return Ran(argv, p.returncode, p.stdout, p.stderr)


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
