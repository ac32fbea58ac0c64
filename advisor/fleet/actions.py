"""Experiments started from the dashboard: each one is `advisor experiment` in a child process, so
that it keeps every guarantee of the command (journal, lock, the baseline restored on any ending,
SIGTERM as an interrupt) and a crash of the web server cannot leave a candidate serving.
The server stops its children with SIGTERM and waits for their restores when it shuts down."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from advisor.errors import AdvisorError
from advisor.fleet.config import WatchedDeployment

# How long a child may take from its start to its experiment's first row (design, recovery, reading
# the target, building prompts), and to print a dry run.
START_WAIT_S = 180.0
PREVIEW_WAIT_S = 120.0


class ActionError(AdvisorError):
    """An action could not be done; `status` is the HTTP status the API answers with."""

    def __init__(self, message: str, status: int = 409):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class CheckRef:
    mechanism: str
    direction: str | None
    readout: str | None
    value: str | None = None


def spec_name(watched: WatchedDeployment) -> str:
    """The name experiments are stored under: the deployment spec's own. Pages ask for it on every
    view (a running experiment's page every 5 s): the file is read again only when it changed."""
    path = _spec(watched)
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        mtime = -1  # load_deployment says what is wrong, in one line
    return _spec_name(path, mtime)


@functools.lru_cache(maxsize=64)
def _spec_name(path: Path, _mtime_ns: int) -> str:
    from advisor.experiments.deployment import load_deployment

    return load_deployment(path).name


def _spec(watched: WatchedDeployment) -> Path:
    if watched.deployment is None:
        raise ActionError(f"{watched.name} has no deployment spec in advisor.yaml (deployment: FILE): "
                          "experiments need one to launch the candidate")
    return watched.deployment


def _argv(watched: WatchedDeployment, ref: CheckRef, diagnosis_id: int | None) -> list[str]:
    argv = [sys.executable, "-m", "advisor.cli", "experiment", "--deployment", str(_spec(watched)),
            "--mechanism", ref.mechanism, "--from-prom", watched.prom_url, "--output", "json"]
    if ref.value is not None:
        argv += ["--value", ref.value]
    if ref.direction:
        argv += ["--direction", ref.direction]
    limits = watched.experiments
    readout = limits.readout or ref.readout
    if readout:
        argv += ["--readout", readout]
    for option, value in (("--blocks", limits.blocks), ("--block-requests", limits.block_requests),
                          ("--concurrency", limits.concurrency), ("--max-duration", limits.max_duration)):
        if value is not None:
            argv += [option, str(value)]
    if limits.fixed:
        argv.append("--fixed")
    if diagnosis_id is not None:
        argv += ["--diagnosis", str(diagnosis_id)]
    return argv


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1].removeprefix("error: ") if lines else "no output"


def _flags(argv: list[str]) -> dict[str, str | None]:
    """--flag value, --flag=value and bare --switch, by flag; positional words under their index."""
    flags: dict[str, str | None] = {}
    i = 0
    while i < len(argv):
        word = argv[i]
        if word.startswith("-") and "=" in word:
            name, _, value = word.partition("=")
            flags[name] = value
        elif word.startswith("-"):
            takes = i + 1 < len(argv) and not argv[i + 1].startswith("-")
            flags[word] = argv[i + 1] if takes else None
            i += takes
        else:
            flags[f"#{i}"] = word
        i += 1
    return flags


def flag_changes(baseline: list[str], candidate: list[str]) -> list[str]:
    """What the candidate's command line changes, one line per flag: "--max-num-seqs 2 -> 8"."""
    a, b = _flags(baseline), _flags(candidate)

    def show(name: str, value: str | None) -> str:
        return name if value is None else f"{name} {value}"

    lines = []
    for name in dict.fromkeys([*a, *b]):
        if name in a and name in b and a[name] != b[name]:
            lines.append(f"{name} {a[name] if a[name] is not None else '(set)'} -> {b[name]}")
        elif name in b and name not in a:
            lines.append(f"{show(name, b[name])} (added)")
        elif name in a and name not in b:
            lines.append(f"{show(name, a[name])} (removed)")
    return lines


class ExperimentRuns:
    """The experiments this server started, as child processes."""

    def __init__(self, store_url: str, log_dir: Path):
        self.store_url = store_url
        self.log_dir = log_dir
        self._children: dict[str, tuple[str, subprocess.Popen]] = {}  # launch key -> (deployment, child)
        self._lock = threading.Lock()

    def _env(self, watched: WatchedDeployment, key: str | None = None) -> dict[str, str]:
        from probes.http import BasicAuth, BearerAuth

        env = {**os.environ, "ADVISOR_DB_URL": self.store_url}
        auth = getattr(watched, "_auth", None)
        # The child reads Prometheus with advisor.yaml's credentials, never on its command line.
        if isinstance(auth, BasicAuth):
            env.update(ADVISOR_PROM_USER=auth.user, ADVISOR_PROM_PASSWORD=auth.password)
        elif isinstance(auth, BearerAuth):
            env["ADVISOR_PROM_TOKEN"] = auth.token
        if key is not None:
            from advisor.experiments.session import LAUNCH_KEY_ENV

            env[LAUNCH_KEY_ENV] = key
        return env

    def preview(self, watched: WatchedDeployment, ref: CheckRef) -> dict:
        """The design the experiment would run: both arms' argv, the flags that differ, guardrails."""
        argv = _argv(watched, ref, None) + ["--dry-run"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=PREVIEW_WAIT_S, env=self._env(watched))
        except subprocess.TimeoutExpired:
            raise ActionError(f"the experiment's plan took longer than {PREVIEW_WAIT_S:.0f} s", 504) from None
        if done.returncode != 0:
            raise ActionError(f"cannot plan the experiment: {_last_line(done.stderr)}")
        plan = json.loads(done.stdout)
        base, cand = plan["baseline_argv"], plan["candidate_argv"]
        plan["changes"] = flag_changes(base, cand)
        plan["guardrails"] = [line for line in plan["plan"] if "guardrail" in line.lower()]
        return plan

    def start(self, watched: WatchedDeployment, ref: CheckRef, diagnosis_id: int | None) -> int:
        """Starts the experiment; returns its store id once its row exists (it then runs on).
        One at a time per deployment: its target lock would refuse a second anyway, later."""
        import secrets

        from advisor.store import open_store

        name = spec_name(watched)
        with self._lock:
            self._reap()
            if any(p.poll() is None for dep, p in self._children.values() if dep == watched.name):
                raise ActionError(f"an experiment is still running on {watched.name}: one at a time")
            key = secrets.token_hex(8)  # the child stores it with its row, so that its row is found
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log = self.log_dir / f"experiment-{watched.name}-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}.log"
            with open(log, "w") as err:
                proc = subprocess.Popen(_argv(watched, ref, diagnosis_id), stdout=subprocess.DEVNULL, stderr=err,
                                        env=self._env(watched, key), start_new_session=True)
            self._children[key] = (watched.name, proc)
        with open_store(self.store_url) as store:
            deadline = time.monotonic() + START_WAIT_S
            while time.monotonic() < deadline:
                found = store.find_experiment_by_launch(name, key)
                if found is not None:
                    return found
                if proc.poll() is not None:
                    raise ActionError(f"the experiment could not start: {_last_line(log.read_text())}")
                time.sleep(0.5)
        self._stop(proc)
        raise ActionError(f"the experiment did not start within {START_WAIT_S:.0f} s (log: {log})", 504)

    def _reap(self) -> None:
        for key, (_, proc) in list(self._children.items()):
            if proc.poll() is not None:  # poll() reaps it: no zombie stays behind
                del self._children[key]

    def stop_all(self) -> None:
        """SIGTERM to every running child (an interrupt: it restores its baseline), then wait."""
        with self._lock:
            children = [p for _, p in self._children.values() if p.poll() is None]
        for proc in children:
            self._stop(proc)

    @staticmethod
    def _stop(proc: subprocess.Popen) -> None:
        from advisor.children import stop_restoring

        # Its own session (start_new_session): the group is the child and its workers only.
        stop_restoring(proc, group=True, what="the experiment")
