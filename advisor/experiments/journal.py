"""One lock and one journal per target. Every state change of an experiment is appended (and
fsynced) before it takes effect, so a run whose process died is recovered at the next start."""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

from advisor.errors import AdvisorError

CLOSED = {"restored", "recovered"}


class Busy(AdvisorError, RuntimeError):
    pass


class TargetLock:
    def __init__(self, directory: Path):
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "lock"
        self._fd: int | None = None

    def __enter__(self) -> "TargetLock":
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise Busy(f"another experiment holds this target (pid {holder}); one at a time") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


class Journal:
    def __init__(self, directory: Path):
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "journal.jsonl"

    def write(self, experiment: str, event: str, **data) -> None:
        line = json.dumps({"t": time.time(), "experiment": experiment, "event": event, **data})
        with open(self.path, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def entries(self, experiment: str | None = None) -> list[dict]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                e = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line from a crash
            if experiment is None or e.get("experiment") == experiment:
                out.append(e)
        return out

    def pending(self) -> tuple[str, list[dict]] | None:
        """The last experiment if it never reached a closed state: it must be recovered."""
        entries = self.entries()
        if not entries:
            return None
        last = entries[-1]["experiment"]
        mine = [e for e in entries if e["experiment"] == last]
        if any(e["event"] in CLOSED for e in mine):
            return None
        return last, mine
