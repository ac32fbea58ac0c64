"""Launchers bring an arm up and take it down. `local` starts engine processes from the deployment
spec (detached, so a restored baseline outlives the advisor); `endpoints` uses arms that already
run. A `kubernetes` launcher (clone a Deployment with one argument changed) fits the same interface."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import deque
from pathlib import Path
from typing import Protocol

import psutil

from advisor.cores import isolate_engine_core
from advisor.errors import AdvisorError
from advisor.experiments.deployment import Deployment
from advisor.experiments.journal import Journal
from advisor.experiments.processes import (
    UNSEEN,
    ProcessRecord,
    Resident,
    holder,
    is_or_descends_from,
    resident_bytes,
)
from probes.http import redact_url

ARMS = ("baseline", "candidate")


class LaunchError(AdvisorError, RuntimeError):
    pass


def healthy(url: str, path: str = "/health", timeout: float = 5.0) -> bool:
    """Whether url+path answers 200 within `timeout` in all (connect, headers and body). An
    untrusted TLS certificate or a bad URL is raised (one line): waiting longer cannot fix it."""
    from advisor import net
    from advisor.errors import ProbeError
    from probes.http import BadUrl, TlsError, client, request

    try:
        with client(net.config("engine", timeout=timeout, url=url)) as c:
            return request(c, "GET", url.rstrip("/") + path, what="engine").status_code == 200
    except (TlsError, BadUrl):
        raise
    except ProbeError:  # unreachable, too slow, an endless body
        return False


def _gone(proc: psutil.Process) -> bool:
    # A killed process that is not our child stays a zombie until its own parent reaps it.
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_gone(proc: psutil.Process, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _gone(proc):
            return True
        time.sleep(0.2)
    return _gone(proc)


def stop_pid(pid: int, grace: float = 20.0) -> None:
    """Stop whatever runs at pid, unchecked: for tests and tools cleaning up their own processes.
    An experiment stops only recorded processes, through stop_recorded."""
    try:
        proc = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    _stop(proc, grace)


def stop_recorded(record: ProcessRecord, grace: float = 20.0) -> str:
    """Stop a recorded process after checking that the live process at its pid is still the
    recorded one (same create time and command line). Returns "stopped", "exited" (it was already
    gone), or why it was left alone."""
    proc, why = record.check()
    if proc is None:
        return "exited" if why == "it has exited" else why
    _stop(proc, grace)
    return "stopped"


def _stop(proc: psutil.Process, grace: float) -> None:
    pid = proc.pid
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return
    # The engine's workers share its process group: signal the group, not just the parent.
    def send(sig: int) -> None:
        try:
            os.killpg(pgid, sig) if pgid == pid else proc.send_signal(sig)
        except (psutil.NoSuchProcess, ProcessLookupError):
            pass
        except (PermissionError, psutil.AccessDenied):
            raise LaunchError(f"not permitted to stop pid {pid} (another user's process)") from None

    send(signal.SIGTERM)
    if not _wait_gone(proc, grace):
        send(signal.SIGKILL)
        if not _wait_gone(proc, 10):
            raise LaunchError(f"process {pid} did not stop")


class Launcher(Protocol):
    starts: int  # engine processes started so far: a change across bring_up means a cold arm

    def url(self, arm: str) -> str: ...
    def urls(self, arm: str) -> list[str]: ...  # the arm's replicas, url(arm) first
    def bring_up(self, arm: str) -> str: ...
    def check(self, arm: str) -> str | None: ...
    def take_down(self, arm: str) -> None: ...
    def restore(self) -> str | None: ...
    def preflight(self) -> None: ...
    def found_state(self) -> dict: ...
    notes: list[str]  # what the launcher could not confirm about the arms, for the report

    def resident_bytes(self, arm: str, files: tuple[str, ...] = ()) -> Resident: ...


class EndpointsLauncher:
    """Both arms already serve: nothing to start, stop or restore; only health is checked, and
    before anything is sent, that the arms differ in the named knob only (arm_check.py)."""

    starts = 0

    def __init__(self, dep: Deployment, mechanism: str | None = None, aa: bool = False):
        self.dep, self.spec = dep, dep.endpoints
        self.mechanism, self.aa = mechanism, aa
        self.notes: list[str] = []

    def url(self, arm: str) -> str:
        return (self.spec.baseline if arm == "baseline" else self.spec.candidate).rstrip("/")

    def urls(self, arm: str) -> list[str]:
        return [self.url(arm)]

    def bring_up(self, arm: str) -> str:
        if not healthy(self.url(arm), self.spec.health_path):
            raise LaunchError(f"the {arm} endpoint {redact_url(self.url(arm))} is not healthy")
        return self.url(arm)

    def check(self, arm: str) -> str | None:
        return None if healthy(self.url(arm), self.spec.health_path) else f"{arm} at {redact_url(self.url(arm))} stopped answering {self.spec.health_path}"

    def take_down(self, arm: str) -> None:
        pass

    def resident_bytes(self, arm: str, files: tuple[str, ...] = ()) -> Resident:
        """Read only where the arm serves on this host (a loopback URL); elsewhere its memory is the
        engine host's to report."""
        from urllib.parse import urlsplit

        u = urlsplit(self.url(arm))
        if u.hostname not in ("127.0.0.1", "localhost", "::1"):
            return Resident()
        return resident_bytes(u.port or (443 if u.scheme == "https" else 80), files)

    def preflight(self) -> None:
        if self.mechanism is None and not self.aa:
            return
        from advisor.experiments import arm_check
        from advisor.experiments.engine_state import observe_url

        base, cand = (observe_url(self.url(arm), self.dep.engine, self.dep.model) for arm in ("baseline", "candidate"))
        note = arm_check.check(base, cand, self.mechanism or "aa", aa=self.aa)
        if note:
            self.notes.append(note)

    def found_state(self) -> dict:
        return {"found_serving": healthy(self.url("baseline"), self.spec.health_path)}

    def restore(self) -> str | None:
        if not healthy(self.url("baseline"), self.spec.health_path):
            raise LaunchError(f"baseline {redact_url(self.url('baseline'))} is not healthy after the experiment")
        return None


class LocalLauncher:
    """Engine processes on this host. Sequential arms share the target port (the candidate replaces
    the baseline between blocks); parallel arms put the candidate on its own port, and with
    baseline_port the baseline arm is a fresh replica there too (the process on port left alone).
    An arm of N replicas serves from its port up (port, port+1, ...): the replicas knob's candidate
    is one more of the same argv.

    It stops only the processes it started itself, and the one it found serving the port when the
    spec says the advisor owns it (`local.owns_process`). Each is journalled with its pid, create
    time and command line, and checked against the live process at that pid before any signal."""

    def __init__(self, dep: Deployment, candidate_args: list[str], candidate_env: dict[str, str],
                 journal: Journal, experiment: str, log_dir: Path, candidate_replicas: int | None = None):
        self.dep, self.spec = dep, dep.local
        self.args = {"baseline": list(self.spec.args), "candidate": candidate_args}
        self.env = {"baseline": dict(self.spec.env), "candidate": {**self.spec.env, **candidate_env}}
        self.replicas = {"baseline": self.spec.replicas, "candidate": candidate_replicas or self.spec.replicas}
        self.journal, self.experiment, self.log_dir = journal, experiment, log_dir
        # What serves the deployment's own port (the baseline, unless a fresh replica stands in for it).
        self.found_serving = healthy(f"http://{self.spec.host}:{self.spec.port}", self.spec.health_path)
        # Who served the port when the experiment began; UNSEEN: something answers, but no process
        # of this host that we can see holds the port.
        self.found = holder(self.spec.port) or (UNSEEN if self.found_serving else None)
        self.found_stopped = False
        # Keyed by arm for an arm's first replica, "arm/i" for its replica i (i >= 1).
        self.started: dict[str, ProcessRecord] = {}
        self.starts = 0
        self.notes: list[str] = []
        # Each replica's own environment beyond the arm's (its own cores), set by the room check.
        self.placement: dict[str, list[dict[str, str]]] = {}

    @property
    def replica(self) -> bool:
        """The baseline arm is a fresh replica on baseline_port, not the process serving port."""
        return self.spec.arms == "parallel" and self.spec.baseline_port is not None

    def port(self, arm: str, replica: int = 0) -> int:
        if self.spec.arms == "parallel":
            if arm == "candidate":
                return self.spec.candidate_port + replica
            if self.replica:
                return self.spec.baseline_port + replica
        return self.spec.port + replica

    def _label(self, arm: str) -> str:
        """The arm as the journal names it: a fresh baseline replica is not the baseline that
        recovery would restore."""
        return "baseline replica" if arm == "baseline" and self.replica else arm

    def url(self, arm: str, replica: int = 0) -> str:
        return f"http://{self.spec.host}:{self.port(arm, replica)}"

    def urls(self, arm: str) -> list[str]:
        """Every replica of the arm, the first one first (its own url)."""
        return [self.url(arm, i) for i in range(self.replicas[arm])]

    def argv(self, arm: str, replica: int = 0) -> list[str]:
        return [*self.spec.command, *self.args[arm], self.spec.port_flag, str(self.port(arm, replica))]

    def _may_stop_found(self) -> bool:
        return self.spec.owns_process and self.found is not None and self.found is not UNSEEN

    def _found_replicas(self, arm: str) -> bool:
        """The arm's replicas beyond the first are the deployment's own (found, never started or
        stopped here): the baseline found serving, in parallel arms."""
        return arm == "baseline" and self.spec.arms == "parallel" and not self.replica

    def preflight(self) -> None:
        """Refuse, before anything starts, an experiment that would have to stop a process the
        advisor may not stop, or that this host has no room for."""
        s = self.spec
        self._preflight_room()
        if self.replica:  # the process serving port is never stopped: only the arms' ports matter
            self._preflight_ports()
            return
        if self.found is UNSEEN and (s.arms == "sequential" or not self.found_serving):
            raise LaunchError(f"port {s.port} is held by {UNSEEN.describe()}: the advisor can neither check nor "
                              f"stop it; use arms: parallel with a candidate_port, or free the port")
        if self.found is not None and not self._may_stop_found():
            if s.arms == "sequential":
                raise LaunchError(f"port {s.port} is held by {self.found.describe()}, which the advisor did not start, "
                                  "and arms: sequential would stop it; set local.owns_process: true if the advisor may "
                                  "stop it and restart the baseline from the spec, or use arms: parallel with a "
                                  "candidate_port")
            if not self.found_serving:
                raise LaunchError(f"port {s.port} is held by {self.found.describe()}, which does not answer "
                                  f"{s.health_path} and which the advisor did not start; free the port, or set "
                                  "local.owns_process: true if the advisor may stop it")
        self._preflight_ports()

    def _preflight_ports(self) -> None:
        """Every port the advisor will start an engine on is free (the first replica's of a
        sequential candidate is the baseline's own, checked above)."""
        mine = [("candidate", i) for i in range(self.replicas["candidate"])]
        if self.replica:
            mine += [("baseline", i) for i in range(self.replicas["baseline"])]
        for arm, i in mine:
            if self.spec.arms == "sequential" and i == 0:
                continue
            port = self.port(arm, i)
            other = holder(port)
            if other is not None:
                name = ("baseline_port" if arm == "baseline" else "candidate_port") if self.spec.arms == "parallel" \
                    else "port"
                where = f"{name} {port}" if i == 0 else f"port {port} ({name} + {i}, for the {arm}'s replica {i + 1})"
                raise LaunchError(f"{where} is held by {other.describe()}, which the advisor did not start; free it or "
                                  f"choose another {name}")

    def _preflight_room(self) -> None:
        if self.replicas["candidate"] == self.replicas["baseline"]:
            return
        from advisor.experiments import room

        host = room.Host.this()
        cores = room.engine_cores(self.dep.engine, [*self.spec.command, *self.args["candidate"]],
                                  self.env["candidate"], host)
        per_engine = resident_bytes(self.spec.port).rss if self.found_serving else None
        n_cand, n_base = self.replicas["candidate"], self.replicas["baseline"]
        if self.spec.arms == "sequential":
            added = n_cand - (n_base if self.found_serving else 0)
        else:
            added = n_cand + (n_base if self.replica else 0)
        why = room.refusal(max(n_cand, n_base), added, cores, per_engine, host)
        if why:
            raise LaunchError(f"no room on this host for the replicas experiment: {why}")
        self.notes.extend(room.unknowns(cores, per_engine))
        for arm in ("candidate", "baseline") if self.replica else ("candidate",):
            self.placement[arm] = room.binds(cores, self.replicas[arm])
            if any(self.placement[arm]):
                self.notes.append(f"the {arm}'s replicas each on their own cores: "
                                  + ", ".join(" ".join(f"{k}={v}" for k, v in env.items())
                                              for env in self.placement[arm]))

    def found_state(self) -> dict:
        """What the journal's "begin" keeps: whether the baseline was serving, and who served it."""
        return {"found_serving": self.found_serving, "arms": self.spec.arms, "owns_process": self.spec.owns_process,
                "baseline_replica": self.spec.baseline_port if self.replica else None,
                "replicas": dict(self.replicas),
                "found": None if self.found in (None, UNSEEN) else self.found.entry(),
                "found_unseen": self.found is UNSEEN}

    def _whose(self, rec: ProcessRecord) -> str | None:
        """'baseline' or 'candidate' for a process this launcher started (or one of its children),
        'found' for the process found serving the port, None for anyone else's."""
        if rec is UNSEEN:
            return "found" if self.found is UNSEEN else None
        key = self._key_of(rec.pid)
        if key is not None:
            return key.split("/")[0]
        if self.found not in (None, UNSEEN) and rec.pid == self.found.pid and self.found.alive():
            return "found"
        return None

    def _holder(self, arm: str) -> ProcessRecord | None:
        now = holder(self.port(arm))
        if now is None and arm == "baseline" and self.found is UNSEEN and healthy(self.url(arm), self.spec.health_path):
            return UNSEEN
        return now

    def _key_of(self, pid: int) -> str | None:
        """The key of the process this launcher started that pid is (or descends from), or None."""
        return next((k for k, mine in self.started.items() if is_or_descends_from(pid, mine)), None)

    def _keys(self, arm: str) -> list[str]:
        return [k for k in self.started if k.split("/")[0] == arm]

    def bring_up(self, arm: str) -> str:
        url = self.url(arm)
        for key in self._keys(arm):
            # Started and never stopped by us, and gone: it died while the other arm ran. Starting it
            # again would hide the failure, and a fresh engine is not the arm that ran the blocks.
            rec = self.started[key]
            if not rec.alive():
                raise LaunchError(f"the {_named(key)} engine (pid {rec.pid}) died between its blocks")
        if self.spec.arms == "sequential":  # the other arm's further replicas would outlive its switch
            other = "candidate" if arm == "baseline" else "baseline"
            for key in self._keys(other):
                if "/" in key:
                    self._stop_mine(key)
        start: list[int] = []
        now = self._holder(arm)
        if now is not None:
            whose = self._whose(now)
            if not ((whose == arm or (arm == "baseline" and whose == "found")) and healthy(url, self.spec.health_path)):
                self._stop_holder(now, whose, self.port(arm))
                start.append(0)
        else:
            start.append(0)
        start += [i for i in range(1, self.replicas[arm]) if self._replica_to_start(arm, i)]
        if start:
            self._start_all(arm, start)
        return url

    def _replica_to_start(self, arm: str, i: int) -> bool:
        """Whether replica i of the arm must be started (a stale one of ours is stopped first)."""
        url, key = self.url(arm, i), f"{arm}/{i}"
        if self._found_replicas(arm):
            if not healthy(url, self.spec.health_path):
                raise LaunchError(f"the baseline's replica {i + 1} at {url} is not healthy")
            return False
        now = holder(self.port(arm, i))
        if now is not None:
            if key in self.started and is_or_descends_from(now.pid, self.started[key]) \
                    and healthy(url, self.spec.health_path):
                return False
            whose = self._whose(now)
            if whose not in ("baseline", "candidate"):
                raise LaunchError(f"port {self.port(arm, i)} is held by {now.describe()}, which the advisor did not "
                                  "start; it leaves it alone")
            self._stop_mine(self._key_of(now.pid))
        return True

    def _stop_holder(self, now: ProcessRecord, whose: str | None, port: int) -> None:
        if whose in ("baseline", "candidate"):
            self._stop_mine(self._key_of(now.pid) or whose)
            return
        if whose == "found" and self._may_stop_found():
            found = self.found
            self.found_stopped = True
            self.journal.write(self.experiment, "stopping", arm="baseline", who="found", **found.entry())
            outcome = stop_recorded(found)
            self.journal.write(self.experiment, "stopped", arm="baseline", who="found", pid=found.pid, outcome=outcome)
            if outcome in ("stopped", "exited"):
                return
            raise LaunchError(f"left {found.describe()} alone: {outcome}")
        raise LaunchError(f"port {port} is held by {now.describe()}, which the advisor did not start; it leaves it "
                          "alone (local.owns_process: true lets it stop the process found serving the port)")

    def _stop_mine(self, key: str) -> str:
        rec = self.started.pop(key)
        arm, _, i = key.partition("/")
        label = self._label(arm)
        extra = {"replica": int(i) + 1} if i else {}
        self.journal.write(self.experiment, "stopping", arm=label, who="advisor", **rec.entry(), **extra)
        outcome = stop_recorded(rec)
        self.journal.write(self.experiment, "stopped", arm=label, who="advisor", pid=rec.pid, outcome=outcome, **extra)
        return outcome

    def _start(self, arm: str, replica: int = 0) -> None:
        self._start_all(arm, [replica])

    def _start_all(self, arm: str, replicas: list[int]) -> None:
        """Start these replicas of the arm together (two vLLM replicas take one start's time, not
        two) and wait until each is healthy; LaunchError for the first that is not."""
        pending = [self._spawn(arm, i) for i in replicas]
        for p in pending:
            self._await(*p)

    def _spawn(self, arm: str, replica: int):
        key = arm if replica == 0 else f"{arm}/{replica}"
        extra = {"replica": replica + 1} if replica else {}
        self.log_dir.mkdir(parents=True, exist_ok=True)
        name = arm if replica == 0 else f"{arm}-r{replica + 1}"
        log_path = self.log_dir / f"{self.experiment}-{name}-{int(time.time())}.log"
        # The advisor's own PYTHONPATH would shadow the engine's environment; the spec may set one.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | self.env[arm]
        placed = self.placement.get(arm) or []
        if replica < len(placed):
            env |= placed[replica]
        argv = self.argv(arm, replica)
        self.starts += 1
        with open(log_path, "wb") as log:
            # Detached: a restored baseline must keep serving after the advisor exits.
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    env=env, start_new_session=True)
        # A record that never matches a live process when this one could not be read: never signalled.
        rec = ProcessRecord.of(proc.pid) or ProcessRecord(proc.pid, -1.0, tuple(argv))
        self.started[key] = rec
        self.journal.write(self.experiment, "starting", arm=self._label(arm), **rec.entry(), argv=argv,
                           log=str(log_path), **extra)
        return arm, replica, key, name, extra, proc, rec, log_path, time.monotonic() + self.spec.start_timeout_s

    def _await(self, arm: str, replica: int, key: str, name: str, extra: dict, proc: subprocess.Popen,
               rec: ProcessRecord, log_path: Path, deadline: float) -> None:
        url = self.url(arm, replica)
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self.started.pop(key, None)
                self.journal.write(self.experiment, "exited", arm=self._label(arm), pid=proc.pid,
                                   code=proc.returncode, **extra)
                raise LaunchError(f"the {name} engine exited with code {proc.returncode} while starting; "
                                  f"last log lines: {_tail(log_path)}")
            if healthy(url, self.spec.health_path, timeout=2):
                placement = isolate_engine_core(proc.pid) if self.spec.isolate_engine_core else None
                # Read again once serving: an engine may retitle itself while it starts.
                self.started[key] = ProcessRecord.of(proc.pid) or rec
                self.journal.write(self.experiment, "started", arm=self._label(arm), **self.started[key].entry(),
                                   placement=placement, **extra)
                return
            time.sleep(1.0)
        self._stop_mine(key)
        proc.poll()
        raise LaunchError(f"the {name} engine was not healthy after {self.spec.start_timeout_s:.0f}s; "
                          f"last log lines: {_tail(log_path)}")

    def check(self, arm: str) -> str | None:
        for key in self._keys(arm):
            rec = self.started[key]
            if not rec.alive():
                return f"the {_named(key)} engine (pid {rec.pid}) died"
        for i, url in enumerate(self.urls(arm)):
            if not healthy(url, self.spec.health_path):
                return f"the {arm} engine at {url} is unhealthy"
        return None

    def resident_bytes(self, arm: str, files: tuple[str, ...] = ()) -> Resident:
        """The arm's engines' memory now, all its replicas together (read, never signalled)."""
        parts = [resident_bytes(self.port(arm, i), files) for i in range(self.replicas[arm])]
        return parts[0] if len(parts) == 1 else Resident.total(parts)

    def take_down(self, arm: str) -> None:
        """Stop the arm's engines that this launcher started; anything else is left alone."""
        for key in self._keys(arm):
            self._stop_mine(key)

    def restore(self) -> str:
        """Leave the target as it was found: the baseline serving (verified healthy) if it was
        serving before, restarted with its own flags only where the advisor had stopped it; nothing
        of ours running otherwise. Returns what it did."""
        self.take_down("candidate")
        if self.replica:
            self.take_down("baseline")
            url = f"http://{self.spec.host}:{self.spec.port}"
            if not self.found_serving:
                return "both arms were fresh replicas, now stopped; nothing served the deployment's port before"
            if healthy(url, self.spec.health_path):
                return ("both arms were fresh replicas, now stopped; the deployment's own process was not touched, "
                        "verified healthy")
            raise LaunchError(f"the deployment's own process at {url} is not healthy; the advisor did not touch it "
                              "(both arms were fresh replicas, now stopped)")
        url = self.url("baseline")
        if not self.found_serving:
            self.take_down("baseline")
            return "the baseline was not serving when the experiment began; everything the advisor started is stopped"
        if healthy(url, self.spec.health_path):
            return "baseline serving with its own flags, verified healthy"
        if not (self.found_stopped or "baseline" in self.started):
            raise LaunchError(f"the baseline found serving at {url} is not healthy, and the advisor did not stop it; "
                              "left as it is")
        now = holder(self.spec.port)
        if now is not None:
            whose = self._whose(now)
            if whose not in ("baseline", "candidate"):
                raise LaunchError(f"port {self.spec.port} is held by {now.describe()}, which the advisor did not "
                                  "start; the baseline was not restarted")
            self._stop_holder(now, whose, self.spec.port)
        self._start("baseline")
        if not healthy(url, self.spec.health_path):
            raise LaunchError("the baseline did not come back healthy")
        return "baseline restarted with its own flags, verified healthy"


def _named(key: str) -> str:
    """'candidate' for an arm's first replica, 'candidate replica 2' for its second."""
    arm, _, i = key.partition("/")
    return f"{arm} replica {int(i) + 1}" if i else arm


def _tail(path: Path, n: int = 8) -> str:
    try:
        with open(path, errors="replace") as f:
            return " | ".join(line.rstrip() for line in deque(f, maxlen=n))
    except OSError:
        return "(no log)"
