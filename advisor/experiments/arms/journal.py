"""One lock and one journal per target. Every state change of an experiment is appended (and
fsynced) before it takes effect, so a run whose process died is recovered at the next start."""

from __future__ import annotations

import fcntl
import json
import os
import stat
import time
from pathlib import Path

from advisor.errors import AdvisorError

CLOSED = {"restored", "recovered"}
# Each experiment appends a few dozen lines of about a kilobyte: thousands of experiments fit. A
# larger file was not written by the advisor alone, and is refused rather than read whole.
JOURNAL_MAX_BYTES = 64 << 20


class Busy(AdvisorError, RuntimeError):
    pass


class JournalError(AdvisorError, RuntimeError):
    """The journal's folder holds something the advisor cannot have written there."""


def open_regular(path: Path, flags: int, mode: int = 0o600) -> int:
    """A descriptor on `path` only if it is a regular file. O_NONBLOCK first: opening a FIFO put in
    the journal's place would wait for a reader or a writer, with no deadline; then fstat refuses
    anything but a file."""
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, mode)
    except OSError as e:
        raise JournalError(f"{path}: cannot open: {e.strerror or e}; move it aside to go on") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise JournalError(f"{path}: not a regular file, so the advisor did not write it; move it aside to go on")
    os.set_blocking(fd, True)
    return fd


class TargetLock:
    def __init__(self, directory: Path):
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "lock"
        self._fd: int | None = None

    def __enter__(self) -> "TargetLock":
        fd = open_regular(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise Busy(f"another experiment holds this target (or a capacity search: pid {holder}); one at a time") from None
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
        # Lines the last read left out, one sentence each: a journal can be edited by hand, and a
        # line the advisor cannot have written must neither stop recovery nor lock the target.
        self.problems: list[str] = []

    def write(self, experiment: str, event: str, **data) -> None:
        line = json.dumps({"t": time.time(), "experiment": experiment, "event": event, **data})
        # Its owner's only: it holds the engines' command lines, which may carry their tokens.
        fd = open_regular(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        with os.fdopen(fd, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def entries(self, experiment: str | None = None) -> list[dict]:
        self.problems = []
        if not self.path.exists():
            return []
        out = []
        with os.fdopen(open_regular(self.path, os.O_RDONLY), "rb") as f:
            data = f.read(JOURNAL_MAX_BYTES + 1)
        if len(data) > JOURNAL_MAX_BYTES:
            raise JournalError(f"{self.path}: larger than {JOURNAL_MAX_BYTES >> 20} MiB, more than the advisor "
                               "writes; move it aside to go on")
        lines = data.decode("utf-8", errors="replace").splitlines()
        for n, line in enumerate(lines, 1):
            try:
                e = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                if n < len(lines):  # a torn last line is a crash's, and expected
                    self.problems.append(f"{self.path} line {n} is not JSON: left out")
                continue
            if not (isinstance(e, dict) and isinstance(e.get("experiment"), str) and isinstance(e.get("event"), str)):
                self.problems.append(f"{self.path} line {n} is not an entry the advisor writes (an object with an "
                                     "experiment and an event): left out")
                continue
            if experiment is None or e["experiment"] == experiment:
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
