"""Recovery of an experiment whose advisor died mid-run: leave the target as the journal says it
was found. Only processes the journal records the advisor starting are stopped, each after checking
that the live process at its pid is still that one (create time and command line) and that it
carries the experiment's mark (ownership.py: a journal can be written by hand, a mark cannot be
copied from it); the baseline is started again only where the advisor had stopped it, and nothing
is started that was not serving. A journal line that is not one the advisor writes is reported and
left out, never an error that would leave the target locked."""

from __future__ import annotations

import time

from advisor import escape, interrupts
from advisor.engine_process import healthy
from advisor.experiments.arms.protocol import LaunchError, stop_recorded
from advisor.experiments.design.deployment import Deployment
from advisor.experiments.arms.journal import Journal
from advisor.experiments.arms.kube import recover_objects
from advisor.experiments.arms.local import LocalLauncher
from advisor.experiments.arms.ownership import Ownership
from advisor.experiments.arms.processes import ProcessRecord, holder, is_or_descends_from


def _key(pid: object) -> object:
    """A journal's pid as a key and in messages: an int as it is, anything else shown, bounded."""
    return pid if type(pid) is int else escape.one_line(repr(pid), 40)


def recover(dep: Deployment, journal: Journal, log_dir, say=lambda msg: None) -> str | None:
    """Returns what was done, or None when nothing was pending. Raises LaunchError (the journal
    stays pending, so the next start retries) when the baseline the advisor had stopped cannot be
    started again. A SIGINT or SIGTERM that arrives meanwhile is deferred until it is done."""
    pending = journal.pending()
    if pending is None:
        return None
    for problem in journal.problems:
        say(problem)
    experiment, entries = pending
    if dep.launcher == "endpoints":
        journal.write(experiment, "recovered", action="endpoints: nothing to restore")
        return f"experiment {experiment} had not finished; its arms are endpoints, nothing to restore"
    if dep.launcher == "kubernetes":
        with interrupts.shielded():
            say(f"experiment {experiment} did not finish (its advisor died): deleting the arms it created")
            done = recover_objects(dep.kubernetes, experiment, entries)
            journal.write(experiment, "recovered", done=done, at=time.time())
        return "; ".join(done)
    with interrupts.shielded():
        say(f"experiment {experiment} did not finish (its advisor died): leaving the target as it found it")
        done, ok, blocked = _recover_local(dep, journal, experiment, entries, log_dir)
        if blocked:
            journal.write(experiment, "recovery incomplete", done=done, at=time.time())
        else:
            journal.write(experiment, "recovered", done=done, baseline_healthy=ok, at=time.time())
    if blocked:
        raise LaunchError(f"experiment {experiment} did not finish, and its baseline cannot be restored: "
                          + "; ".join(done))
    return "; ".join(done)


def _recover_local(dep: Deployment, journal: Journal, experiment: str, entries: list[dict],
                   log_dir) -> tuple[list[str], bool | None, bool]:
    """(what was done, whether the baseline is healthy (None: it was not serving), whether restoring
    it is blocked)."""
    spec = dep.local
    url = f"http://{spec.host}:{spec.port}"
    begin = next((e for e in entries if e["event"] == "begin"), None)
    found_serving = bool(begin and begin.get("found_serving"))
    ours: dict[object, tuple[str, ProcessRecord | None]] = {}
    for e in entries:  # "started" re-reads the record "starting" wrote: the later one wins
        if e["event"] in ("starting", "started") and "pid" in e:
            ours[_key(e["pid"])] = (escape.one_line(e.get("arm", "?"), 40), ProcessRecord.from_entry(e))
    ownership = Ownership(journal.path.parent)
    replaced = any(e["event"] == "stopping" and e.get("who") == "found" for e in entries) or \
        any(arm == "baseline" for arm, _ in ours.values())
    done: list[str] = []
    kept = False
    for pid, (arm, rec) in ours.items():
        if rec is None:
            done.append(f"left pid {pid} alone: the journal does not record an identity an experiment could have "
                        "started (a pid above 1, its create time and command line)")
            continue
        proc, why = rec.check()
        if proc is None:
            if why != "it has exited":
                done.append(f"left pid {pid} alone: {why}")
            continue
        unproven = ownership.verify(rec.pid, experiment)
        if unproven:
            done.append(f"left pid {pid} alone: {unproven}")
            continue
        if arm == "baseline" and found_serving and not kept and healthy(url, spec.health_path):
            now = holder(spec.port)
            if now is not None and is_or_descends_from(now.pid, rec):
                kept = True
                done.append(f"the baseline it started (pid {pid}) keeps serving")
                continue
        journal.write(experiment, "stopping", arm=arm, who="advisor", **rec.entry())
        outcome = stop_recorded(rec)
        journal.write(experiment, "stopped", arm=arm, who="advisor", pid=pid, outcome=outcome)
        done.append(f"{arm} stopped (pid {pid})" if outcome in ("stopped", "exited") else f"left pid {pid} alone: {outcome}")
    if begin is None:
        done.append("the journal does not say whether the baseline was serving when the experiment began: "
                    "nothing started")
        return done, None, False
    if not found_serving:
        done.append("the baseline was not serving when the experiment began: nothing started")
        return done, None, False
    if healthy(url, spec.health_path):
        now = None if kept else holder(spec.port)
        done.append("baseline healthy" + (f" (served by {now.describe()})" if now else ""))
        return done, True, False
    if not replaced:
        found = ProcessRecord.from_entry(begin.get("found") or {})
        who = f" ({found.describe()})" if found else ""
        done.append(f"the baseline found serving{who} is not healthy, and the advisor did not stop it: left as it is")
        return done, False, False
    now = holder(spec.port)
    if now is not None:
        done.append(f"baseline not restarted: port {spec.port} is held by {now.describe()}, "
                    "which the advisor did not start")
        return done, False, True
    LocalLauncher(dep, [], {}, journal, experiment, log_dir)._start("baseline")
    ok = healthy(url, spec.health_path)
    done.append("baseline restarted with its own flags" + ("" if ok else ", but it is not healthy"))
    return done, ok, False
