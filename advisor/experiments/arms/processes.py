"""Which processes an experiment may signal: only those it started (or was told it owns) and
recorded, and only while the live process at that pid is still the recorded one.

A process is recorded by pid, create time and command line. A pid alone is not an identity: after
the process exits the kernel hands the number to someone else, so every signal is preceded by a
check that the process now at that pid has the recorded create time and command line.

A create time in wall-clock seconds moves when the clock is stepped (NTP, a VM resumed): psutil
adds the boot time, which the kernel recomputes from the clock, to the ticks since boot. So the
boot time read with it is recorded too, and a process whose time since boot is unchanged is the
same process (a live candidate was once taken for a stranger after a one-second step, and left
running).
"""

from __future__ import annotations

import math
import os
import shlex
import socket
import time
from dataclasses import dataclass
from typing import NamedTuple

import psutil
from probes.gpu import process_gpu_bytes
from urllib.parse import urlsplit

CREATE_TIME_SLACK_S = 0.05  # psutil's create time has the kernel's tick resolution (10 ms)


@dataclass(frozen=True)
class ProcessRecord:
    pid: int
    create_time: float
    cmdline: tuple[str, ...]
    boot_time: float | None = None  # read with create_time; None from a journal of an older advisor
    # Whether the advisor started it as the leader of a new session (and so of its own process
    # group): only then may its whole group be signalled.
    session: bool = False

    @classmethod
    def of(cls, pid: int) -> ProcessRecord | None:
        """The live process at pid, recorded now; None if it is gone or cannot be read."""
        try:
            p = psutil.Process(pid)
            cmdline = p.cmdline()
            # Just after a fork-exec the parent may run before the kernel has set up the new image's
            # arguments: an empty command line for a moment.
            for _ in range(50):
                if cmdline or p.status() == psutil.STATUS_ZOMBIE:
                    break
                time.sleep(0.01)
                cmdline = p.cmdline()
            return cls(pid, p.create_time(), tuple(cmdline), psutil.boot_time())
        except (psutil.Error, OSError):
            return None

    @classmethod
    def from_entry(cls, entry: object) -> ProcessRecord | None:
        """From a journal entry; None when the entry lacks an identity (a journal from an older
        advisor) or names no process an experiment could have started (pid 0, 1 or negative, this
        advisor itself, a bool or a string for a number)."""
        if not isinstance(entry, dict):
            return None
        pid, created, cmdline, boot = (entry.get(k) for k in ("pid", "create_time", "cmdline", "boot_time"))
        if not plausible_pid(pid) or not _number(created) or not isinstance(cmdline, list) \
                or not all(isinstance(a, str) for a in cmdline) or not (boot is None or _number(boot)):
            return None
        return cls(pid, float(created), tuple(cmdline), None if boot is None else float(boot),
                   entry.get("session") is True)

    def entry(self) -> dict:
        return {"pid": self.pid, "create_time": self.create_time, "cmdline": list(self.cmdline),
                "boot_time": self.boot_time, "session": self.session}

    @property
    def command(self) -> str:
        text = shlex.join(self.cmdline) if self.cmdline else "?"
        return text if len(text) <= 160 else text[:157] + "..."

    def describe(self) -> str:
        if self.pid == 0:
            return "a process the advisor cannot see (another user's, or in another network namespace)"
        return f"pid {self.pid} ({self.command})"

    def check(self) -> tuple[psutil.Process | None, str]:
        """(the live process, "") when the process at this pid is the recorded one; else (None, why)."""
        if not plausible_pid(self.pid):
            return None, f"pid {self.pid} is no process an experiment starts"
        try:
            p = psutil.Process(self.pid)
            with p.oneshot():
                created, cmdline, status = p.create_time(), tuple(p.cmdline()), p.status()
            boot = psutil.boot_time()
        except psutil.NoSuchProcess:
            return None, "it has exited"
        except (psutil.Error, OSError) as e:
            return None, f"it cannot be inspected ({type(e).__name__})"
        if status == psutil.STATUS_ZOMBIE:
            return None, "it has exited"
        if not self._same_start(created, boot):
            return None, (f"pid {self.pid} now belongs to another process, started later "
                          f"({ProcessRecord(self.pid, created, cmdline).command})")
        if cmdline != self.cmdline:
            return None, (f"the process at pid {self.pid} runs another command "
                          f"({ProcessRecord(self.pid, created, cmdline).command})")
        return p, ""

    def _same_start(self, created: float, boot: float) -> bool:
        if abs(created - self.create_time) <= CREATE_TIME_SLACK_S:
            return True
        return (self.boot_time is not None
                and abs((created - boot) - (self.create_time - self.boot_time)) <= CREATE_TIME_SLACK_S)

    def alive(self) -> bool:
        return self.check()[0] is not None


UNSEEN = ProcessRecord(0, 0.0, ())


def plausible_pid(pid: object) -> bool:
    """Whether pid could be an engine an experiment started: a positive int beyond init (1, which
    no experiment starts and whose signal would reach every process), and not this advisor."""
    return type(pid) is int and 1 < pid < 2**22 + 1 and pid != os.getpid()


def _number(x: object) -> bool:
    return type(x) in (int, float) and math.isfinite(x)


def listening_pids(port: int) -> tuple[set[int], bool]:
    """Pids with a TCP socket listening on a local port, and whether one listener's pid is hidden
    from us (another user's process)."""
    pids, hidden = set(), False
    try:
        connections = psutil.net_connections(kind="tcp")
    except psutil.AccessDenied:  # macOS without root: nothing can be identified, so nothing is ours
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return pids, True
        return pids, False
    for c in connections:
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port:
            if c.pid:
                pids.add(c.pid)
            else:
                hidden = True
    return pids, hidden


def holder(port: int) -> ProcessRecord | None:
    """The process serving a local port, recorded now: the top-most of those sharing the listening
    socket (an engine's workers may inherit its API server's socket). UNSEEN when something listens
    but its process cannot be seen; None when nothing listens."""
    pids, hidden = listening_pids(port)
    for pid in sorted(pids):
        try:
            ancestors = {p.pid for p in psutil.Process(pid).parents()}
        except psutil.Error:
            continue
        if not ancestors & pids:
            record = ProcessRecord.of(pid)
            if record:
                return record
    return UNSEEN if pids or hidden else None


class Resident(NamedTuple):
    """An engine's memory as read from its live processes: RSS of its process tree, the part of it
    that maps the given files (an engine that mmaps its weights: llama.cpp), and its GPU memory
    (NVML's compute processes of the tree); None where not known."""
    rss: int | None = None
    mapped: int | None = None
    gpu: int | None = None

    @staticmethod
    def total(parts: list[Resident]) -> Resident:
        """Several engines' (an arm's replicas) together; a field unknown for any of them is unknown."""
        def add(name: str) -> int | None:
            vals = [getattr(p, name) for p in parts]
            return None if any(v is None for v in vals) else sum(vals)
        return Resident(add("rss"), add("mapped"), add("gpu"))


def _tree(port: int) -> list[psutil.Process]:
    """The process tree holding a local port (an engine and its workers: vLLM's engine core is a
    child of its API server); empty when no process we can see holds it."""
    rec = holder(port)
    if rec is None or rec is UNSEEN:
        return []
    try:
        top = psutil.Process(rec.pid)
        return [top, *top.children(recursive=True)]
    except psutil.Error:
        return []


def serving_pids(url: str) -> set[int]:
    """The process tree serving a loopback URL's port; empty for another host's URL or a port no
    process we can see holds."""

    u = urlsplit(url)
    if u.hostname not in ("127.0.0.1", "localhost", "::1"):
        return set()
    tree = _tree(u.port or (443 if u.scheme == "https" else 80))
    # The advisor itself serving it: a relay to an arm elsewhere (a pod through the API server),
    # whose process tree is the advisor's and its load generator's, not the engine's.
    if tree and tree[0].pid == os.getpid():
        return set()
    return {p.pid for p in tree}


def resident_bytes(port: int, files: tuple[str, ...] = ()) -> Resident:
    """The memory of the process tree serving a local port, read without signalling anything; all
    None when nothing we can see serves the port."""

    tree = _tree(port)
    if not tree:
        return Resident()
    wanted = {os.path.realpath(f) for f in files}
    total, mapped, found = 0, 0, False
    try:
        for p in tree:
            total += p.memory_info().rss
            if wanted:
                for m in p.memory_maps(grouped=True):
                    if m.path and os.path.realpath(m.path) in wanted:
                        mapped, found = mapped + m.rss, True
    except psutil.Error:
        return Resident()
    return Resident(total, mapped if found else None, process_gpu_bytes({p.pid for p in tree}))


def is_or_descends_from(pid: int, record: ProcessRecord) -> bool:
    """Whether pid is the recorded process (still the same one) or one of its descendants."""
    if pid == 0 or not record.alive():
        return False
    if pid == record.pid:
        return True
    try:
        return any(p.pid == record.pid for p in psutil.Process(pid).parents())
    except psutil.Error:
        return False
