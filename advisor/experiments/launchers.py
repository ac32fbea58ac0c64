"""Launchers bring an arm up and take it down. `local` starts engine processes from the deployment
spec (detached, so a restored baseline outlives the advisor); `endpoints` uses arms that already
run. A `kubernetes` launcher (clone a Deployment with one argument changed) fits the same interface."""

from __future__ import annotations

from advisor.errors import AdvisorError
import os
import signal
import subprocess
import time
from collections import deque
from pathlib import Path
from typing import Protocol

import httpx
import psutil

from advisor.cores import isolate_engine_core
from advisor.experiments.deployment import Deployment
from advisor.experiments.journal import Journal

ARMS = ("baseline", "candidate")


class LaunchError(AdvisorError, RuntimeError):
    pass


def healthy(url: str, path: str = "/health", timeout: float = 5.0) -> bool:
    try:
        return httpx.get(url.rstrip("/") + path, timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def listener(port: int) -> int | None:
    """The pid listening on a local TCP port, if any."""
    for c in psutil.net_connections(kind="tcp"):
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
            return c.pid
    return None


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
    try:
        proc = psutil.Process(pid)
        pgid = os.getpgid(pid)
    except (psutil.NoSuchProcess, ProcessLookupError):
        return
    # The engine's workers share its process group: signal the group, not just the parent.
    def send(sig: int) -> None:
        try:
            os.killpg(pgid, sig) if pgid == pid else proc.send_signal(sig)
        except (psutil.NoSuchProcess, ProcessLookupError):
            pass

    send(signal.SIGTERM)
    if not _wait_gone(proc, grace):
        send(signal.SIGKILL)
        if not _wait_gone(proc, 10):
            raise LaunchError(f"process {pid} did not stop")


class Launcher(Protocol):
    def url(self, arm: str) -> str: ...
    def bring_up(self, arm: str) -> str: ...
    def check(self, arm: str) -> str | None: ...
    def take_down(self, arm: str) -> None: ...
    def restore(self) -> None: ...


class EndpointsLauncher:
    """Both arms already serve: nothing to start, stop or restore; only health is checked."""

    def __init__(self, dep: Deployment):
        self.spec = dep.endpoints

    def url(self, arm: str) -> str:
        return (self.spec.baseline if arm == "baseline" else self.spec.candidate).rstrip("/")

    def bring_up(self, arm: str) -> str:
        if not healthy(self.url(arm), self.spec.health_path):
            raise LaunchError(f"the {arm} endpoint {self.url(arm)} is not healthy")
        return self.url(arm)

    def check(self, arm: str) -> str | None:
        return None if healthy(self.url(arm), self.spec.health_path) else f"{arm} at {self.url(arm)} stopped answering {self.spec.health_path}"

    def take_down(self, arm: str) -> None:
        pass

    def restore(self) -> None:
        if not healthy(self.url("baseline"), self.spec.health_path):
            raise LaunchError(f"baseline {self.url('baseline')} is not healthy after the experiment")


class LocalLauncher:
    """Engine processes on this host. Sequential arms share the target port (the candidate replaces
    the baseline between blocks); parallel arms put the candidate on its own port."""

    def __init__(self, dep: Deployment, candidate_args: list[str], candidate_env: dict[str, str],
                 journal: Journal, experiment: str, log_dir: Path):
        self.dep, self.spec = dep, dep.local
        self.args = {"baseline": list(self.spec.args), "candidate": candidate_args}
        self.env = {"baseline": dict(self.spec.env), "candidate": {**self.spec.env, **candidate_env}}
        self.journal, self.experiment, self.log_dir = journal, experiment, log_dir
        self.found_serving = healthy(self.url("baseline"), self.spec.health_path)
        self.started: dict[str, int] = {}

    def port(self, arm: str) -> int:
        return self.spec.candidate_port if arm == "candidate" and self.spec.arms == "parallel" else self.spec.port

    def url(self, arm: str) -> str:
        return f"http://{self.spec.host}:{self.port(arm)}"

    def argv(self, arm: str) -> list[str]:
        return [*self.spec.command, *self.args[arm], self.spec.port_flag, str(self.port(arm))]

    def serving(self, arm: str) -> str | None:
        """Which arm holds the arm's port now, judged by the journal's pids."""
        pid = listener(self.port(arm))
        return None if pid is None else ("candidate" if pid == self.started.get("candidate") else "baseline")

    def bring_up(self, arm: str) -> str:
        url = self.url(arm)
        if self.spec.arms == "sequential":
            other = "candidate" if arm == "baseline" else "baseline"
            holder = listener(self.port(arm))
            if holder is not None and (self.serving(arm) == arm) and healthy(url, self.spec.health_path):
                return url
            if holder is not None:
                self.journal.write(self.experiment, "stopping", arm=other, pid=holder)
                stop_pid(holder)
                self.journal.write(self.experiment, "stopped", arm=other, pid=holder)
        elif healthy(url, self.spec.health_path) and (arm == "baseline" or self.started.get(arm)):
            return url
        self._start(arm)
        return url

    def _start(self, arm: str) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{self.experiment}-{arm}-{int(time.time())}.log"
        # The advisor's own PYTHONPATH would shadow the engine's environment; the spec may set one.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | self.env[arm]
        with open(log_path, "wb") as log:
            # Detached: a restored baseline must keep serving after the advisor exits.
            proc = subprocess.Popen(self.argv(arm), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    env=env, start_new_session=True)
        self.started[arm] = proc.pid
        self.journal.write(self.experiment, "starting", arm=arm, pid=proc.pid, argv=self.argv(arm), log=str(log_path))
        deadline = time.monotonic() + self.spec.start_timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise LaunchError(f"the {arm} engine exited with code {proc.returncode} while starting; "
                                  f"last log lines: {_tail(log_path)}")
            if healthy(self.url(arm), self.spec.health_path, timeout=2):
                placement = isolate_engine_core(proc.pid) if self.spec.isolate_engine_core else None
                self.journal.write(self.experiment, "started", arm=arm, pid=proc.pid, placement=placement)
                return
            time.sleep(1.0)
        stop_pid(proc.pid)
        raise LaunchError(f"the {arm} engine was not healthy after {self.spec.start_timeout_s:.0f}s; "
                          f"last log lines: {_tail(log_path)}")

    def check(self, arm: str) -> str | None:
        pid = self.started.get(arm)
        if pid is not None and not psutil.pid_exists(pid):
            return f"the {arm} engine (pid {pid}) died"
        if not healthy(self.url(arm), self.spec.health_path):
            return f"the {arm} engine at {self.url(arm)} is unhealthy"
        return None

    def take_down(self, arm: str) -> None:
        pid = self.started.pop(arm, None) or (listener(self.port(arm)) if arm == "candidate" else None)
        if pid:
            self.journal.write(self.experiment, "stopping", arm=arm, pid=pid)
            stop_pid(pid)
            self.journal.write(self.experiment, "stopped", arm=arm, pid=pid)

    def restore(self) -> None:
        """Leave the target as it was found: the baseline serving with its own flags (verified
        healthy) if it was serving before, nothing of ours running otherwise."""
        if "candidate" in self.started or (self.spec.arms == "sequential" and self.serving("baseline") == "candidate"):
            self.take_down("candidate")
        if self.found_serving:
            if not healthy(self.url("baseline"), self.spec.health_path):
                self._start("baseline")
            if not healthy(self.url("baseline"), self.spec.health_path):
                raise LaunchError("the baseline did not come back healthy")
        elif "baseline" in self.started:
            self.take_down("baseline")


def _tail(path: Path, n: int = 8) -> str:
    try:
        with open(path, errors="replace") as f:
            return " | ".join(line.rstrip() for line in deque(f, maxlen=n))
    except OSError:
        return "(no log)"
