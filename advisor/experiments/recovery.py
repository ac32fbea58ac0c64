"""Recovery of an experiment whose advisor died mid-run: stop the candidate it had started and
bring the baseline back if it was serving when the experiment began."""

from __future__ import annotations

import time

import psutil

from advisor.experiments.deployment import Deployment
from advisor.experiments.journal import Journal
from advisor.experiments.launchers import LocalLauncher, healthy, listener, stop_pid


def recover(dep: Deployment, journal: Journal, log_dir, say=lambda msg: None) -> str | None:
    """Returns what was done, or None when nothing was pending."""
    pending = journal.pending()
    if pending is None:
        return None
    experiment, entries = pending
    if dep.launcher != "local":
        journal.write(experiment, "recovered", action="endpoints: nothing to restore")
        return f"experiment {experiment} had not finished; its arms are endpoints, nothing to restore"
    say(f"experiment {experiment} did not finish (its advisor died): restoring the baseline")
    begin = next((e for e in entries if e["event"] == "begin"), {})
    for e in entries:
        if e["event"] == "starting" and e.get("arm") == "candidate" and psutil.pid_exists(e["pid"]):
            stop_pid(e["pid"])
    journal.write(experiment, "candidate stopped")
    launcher = LocalLauncher(dep, [], {}, journal, experiment, log_dir)
    launcher.found_serving = bool(begin.get("found_serving", True))
    done = "candidate stopped"
    if launcher.found_serving and not healthy(launcher.url("baseline"), dep.local.health_path):
        holder = listener(dep.local.port)
        if holder:
            stop_pid(holder)
        launcher._start("baseline")
        done += "; baseline restarted with its own flags"
    ok = healthy(launcher.url("baseline"), dep.local.health_path) if launcher.found_serving else True
    journal.write(experiment, "recovered", baseline_healthy=ok, at=time.time())
    return f"{done}; baseline healthy: {ok}"
