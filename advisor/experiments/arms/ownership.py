"""Proof that a process was started by an experiment of this advisor, not just that it matches a
journal line.

A journal records each started process by pid, create time and command line, which tells a live
process from a reused pid, but anyone who can write the journal can copy those three from any
process (the user's own `sleep`, PID 1) and `recover` would stop it. So every engine an experiment
starts carries a mark in its environment: an HMAC of the experiment's id under a key that lives
beside the journal, readable by its owner only, and written nowhere else. The kernel keeps a
process's initial environment (/proc/PID/environ) and its children inherit it; a process the advisor
did not start cannot carry the mark unless its starter read the key. `recover` stops only processes
whose environment carries the mark of the experiment being recovered.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

import psutil

from advisor.experiments.arms.journal import JournalError, open_regular

MARK_VARIABLE = "ADVISOR_EXPERIMENT_MARK"
_KEY_FILE = "owner.key"
KEY_BYTES = 32


class Ownership:
    """The marks of the experiments journalled in one folder."""

    def __init__(self, directory: Path):
        self.path = Path(directory) / _KEY_FILE

    def _key(self) -> bytes:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return self._read_key()
        key = secrets.token_bytes(KEY_BYTES)
        try:
            os.write(fd, key)
            os.fsync(fd)
        finally:
            os.close(fd)
        return key

    def _read_key(self) -> bytes:
        with os.fdopen(open_regular(self.path, os.O_RDONLY), "rb") as f:
            key = f.read(KEY_BYTES + 1)
        if len(key) != KEY_BYTES:
            raise JournalError(f"{self.path}: not a key the advisor wrote ({KEY_BYTES} bytes); the experiments "
                               "journalled beside it cannot be proven the advisor's")
        return key

    def mark(self, experiment: str) -> str:
        return hmac.new(self._key(), experiment.encode(), hashlib.sha256).hexdigest()

    def env(self, experiment: str) -> dict[str, str]:
        """What a process started for this experiment carries in its environment."""
        return {MARK_VARIABLE: self.mark(experiment)}

    def verify(self, pid: int, experiment: str) -> str | None:
        """None when the live process at pid carries this experiment's mark; else why not (it is
        then never signalled)."""
        if not self.path.is_file():
            return "no experiment was ever started from this journal's folder (no key)"
        try:
            environ = psutil.Process(pid).environ()
        except psutil.NoSuchProcess:
            return "it has exited"
        except (psutil.Error, OSError) as e:
            return f"its environment cannot be read ({type(e).__name__}), so it cannot be shown to be the advisor's"
        carried = environ.get(MARK_VARIABLE)
        if carried is None:
            return "it does not carry the advisor's mark: the advisor did not start it"
        try:
            ours = self.mark(experiment)
        except JournalError as e:
            return f"its mark cannot be checked: {e}"
        if not hmac.compare_digest(carried, ours):
            return f"it carries the mark of another experiment, not {experiment}'s"
        return None
