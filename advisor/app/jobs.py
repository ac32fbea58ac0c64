"""Experiments run in a worker process that the dashboard supervises.

An experiment holds a target's lock and journal and must restore its baseline on any ending, SIGTERM
included; in a process of its own it keeps all of that, and a crash of the web server cannot leave a
candidate serving. The worker is this module (`python -m advisor.app.jobs`): it reads one typed
`ExperimentRequest` as JSON on stdin and calls the experiment service, the same one `advisor
experiment` calls. It leads its own session, so its group is it and its load-generator workers.

Its contract: its row appears in the store with the launch key it was given (ADVISOR_LAUNCH_KEY);
exit 0 finished, 1 aborted (a guardrail, or SIGTERM after the restore), 2 could not start (the reason
the last line of its log, "error: ..."), 3 a bug.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from advisor.app.experiment import ExperimentRequest
from advisor.errors import AdvisorError
from advisor import interrupts
from advisor.app import experiment
from advisor.children import stop_restoring
from advisor.escape import plain
from advisor.experiments.run.session import LAUNCH_KEY_ENV

# The dashboard's own token: the worker runs an experiment and answers no request, so it has no use
# for it, and whatever it starts or logs must never see it (its engines' environment is built apart,
# advisor/child_env.py). Its Prometheus and engine credentials it needs, to read the target.
DASHBOARD_ONLY = ("ADVISOR_API_TOKEN", "ADVISOR_API_TOKEN_FILE")

# How long a worker may take from its start to its experiment's first row (design, recovery, reading
# the target, building prompts).
START_WAIT_S = 180.0


class JobError(AdvisorError):
    """A job could not be started; `status` is the HTTP status an API answers with."""

    def __init__(self, message: str, status: int = 409):
        super().__init__(message)
        self.status = status


@dataclass
class _Job:
    group: str  # one running job per group (a watched deployment)
    proc: subprocess.Popen
    log: Path


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1].removeprefix("error: ") if lines else "no output"


def worker_environment(env: dict[str, str], key: str) -> dict[str, str]:
    """This process' environment without the dashboard's token, then what the job adds."""

    kept = {k: v for k, v in os.environ.items() if k not in DASHBOARD_ONLY}
    return {**kept, **env, LAUNCH_KEY_ENV: key}


def open_log(path: Path):
    """The worker's log, readable by this user only (0600): it quotes the target's answers."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w")


class ExperimentJobs:
    """The experiments this process started, each in a worker. `find_row(launch_key)` answers the
    store id of the worker's experiment once its row exists."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self._jobs: dict[str, _Job] = {}  # launch key -> job
        self._lock = threading.Lock()

    def start(self, request: ExperimentRequest, *, group: str, env: dict[str, str],
              find_row: Callable[[str], int | None]) -> int:
        """Starts the worker; returns its experiment's store id once the row exists (it then runs
        on). One at a time per group. `env`: what the worker adds to this process' environment
        (the store's URL, credentials for the target's Prometheus: never on a command line)."""
        with self._lock:
            self._reap()
            if any(j.proc.poll() is None for j in self._jobs.values() if j.group == group):
                raise JobError(f"an experiment is still running on {group}: one at a time")
            key = secrets.token_hex(8)  # stored with the worker's row, so that its row is found
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log = self.log_dir / f"experiment-{group}-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}.log"
            with open_log(log) as err:
                proc = subprocess.Popen([sys.executable, "-m", "advisor.app.jobs"], stdin=subprocess.PIPE,
                                        stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
                                        env=worker_environment(env, key), text=True)
            try:
                proc.stdin.write(request.model_dump_json())
                proc.stdin.close()
            except BrokenPipeError:  # it ended at once: its log says why, below
                pass
            self._jobs[key] = _Job(group, proc, log)
        deadline = time.monotonic() + START_WAIT_S
        while time.monotonic() < deadline:
            found = find_row(key)
            if found is not None:
                return found
            if proc.poll() is not None:
                raise JobError(f"the experiment could not start: {last_line(log.read_text())}")
            time.sleep(0.5)
        self._stop(proc)
        raise JobError(f"the experiment did not start within {START_WAIT_S:.0f} s (log: {log})", 504)

    def _reap(self) -> None:
        for key, job in list(self._jobs.items()):
            if job.proc.poll() is not None:  # poll() reaps it: no zombie stays behind
                del self._jobs[key]

    def stop_all(self) -> None:
        """SIGTERM to every running worker (an interrupt: it restores its baseline), then wait."""
        with self._lock:
            running = [j.proc for j in self._jobs.values() if j.proc.poll() is None]
        for proc in running:
            self._stop(proc)

    @staticmethod
    def _stop(proc: subprocess.Popen) -> None:
        # Its own session (start_new_session): the group is the worker and its helpers only.
        stop_restoring(proc, group=True, what="the experiment")


def _say(line: str) -> None:
    sys.stderr.write(plain(line) + "\n")
    sys.stderr.flush()


def main() -> int:
    """The worker: one request on stdin, the experiment, its exit code."""

    interrupts.install(_say)
    try:
        request = ExperimentRequest.model_validate_json(sys.stdin.read())
        result = experiment.run(request, say=lambda m: _say(f"[experiment] {m}"),
                                note=lambda m: _say(f"recovered: {m}"))
    except AdvisorError as e:
        _say(f"error: {e}")
        return 2
    except KeyboardInterrupt:  # before the experiment began: nothing to restore
        return 130
    except Exception as e:  # noqa: BLE001  (a bug, said in one line for the dashboard)
        _say(f"error: internal error: {type(e).__name__}: {e}")
        return 3
    return 0 if result.status == "finished" else 1


if __name__ == "__main__":
    sys.exit(main())
