"""The local launcher: engine processes on this host, started from the deployment spec (detached,
so a restored baseline outlives the advisor). The protocol every launcher shares and the stopping of
a recorded process are in protocol.py; starting an engine process and waiting for its health,
shared with the demo stack, in advisor/engine_process.py."""

from __future__ import annotations

import socket
import time
from dataclasses import replace
from pathlib import Path

from advisor import child_env, children, engine_process
from advisor.cores import isolate_engine_core
from advisor.engine_process import healthy
from advisor.experiments.arms import engine_readouts, room
from advisor.experiments.arms.journal import Journal
from advisor.experiments.arms.ownership import Ownership
from advisor.experiments.arms.processes import (
    UNSEEN,
    ProcessRecord,
    Resident,
    holder,
    is_or_descends_from,
    resident_bytes,
)
from advisor.experiments.arms.protocol import LaunchError, stop_recorded
from advisor.experiments.design.deployment import Deployment

# How long a port that looks held by nobody's process is read again (an engine of ours being killed).
SETTLE_S = 1.0


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
                 journal: Journal, experiment: str, log_dir: Path, candidate_replicas: int | None = None,
                 baseline: str = "auto"):
        """baseline: what the baseline arm is in parallel arms without local.baseline_port: "found"
        (the process serving the port), "fresh" (a replica started like the candidate), or "auto"
        (fresh when the process found serving carries traffic of its own, and there is room)."""
        self.dep, self.spec = dep, dep.local
        self.choice = baseline
        self.baseline_port = self.spec.baseline_port
        self.args = {"baseline": list(self.spec.args), "candidate": candidate_args}
        self.env = {"baseline": dict(self.spec.env), "candidate": {**self.spec.env, **candidate_env}}
        self.replicas = {"baseline": self.spec.replicas, "candidate": candidate_replicas or self.spec.replicas}
        self.journal, self.experiment, self.log_dir = journal, experiment, log_dir
        self.ownership = Ownership(journal.path.parent)
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
        return self.spec.arms == "parallel" and self.baseline_port is not None

    def port(self, arm: str, replica: int = 0) -> int:
        if self.spec.arms == "parallel":
            if arm == "candidate":
                return self.spec.candidate_port + replica
            if self.replica:
                return self.baseline_port + replica
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
        self._choose_baseline()
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

    def _choose_baseline(self) -> None:
        """A fresh baseline replica where the process found serving has users of its own (their load
        would fall on one arm only, and on the host the load generator shares), or where asked;
        refused before anything starts, with the choices, where this host has no room for it."""
        s = self.spec
        if self.choice == "fresh" and s.arms != "parallel":
            raise LaunchError("--baseline fresh needs arms: parallel and a candidate_port (sequential arms replace "
                              "the process serving the port)")
        if s.arms == "sequential" and self.found_serving and self.choice == "auto":
            busy = engine_readouts.outside_traffic(self.url("baseline"), self.dep.engine, self.dep.model)
            if busy:
                # Its users stay on the port whichever arm serves it: both arms carry their load,
                # counted per block, and the candidate serves them while it runs (owns_process).
                self.notes.append(f"the engine found serving port {s.port} carries outside traffic ({busy}): with "
                                  "sequential arms its users are served by whichever arm holds the port, the candidate "
                                  "included; their requests are counted and reported per block")
            return
        if self.replica or s.arms != "parallel" or not self.found_serving or self.choice == "found":
            return
        busy = engine_readouts.outside_traffic(self.url("baseline"), self.dep.engine, self.dep.model) if self.choice == "auto" else None
        if self.choice == "auto" and busy is None:
            return
        who = self.found.describe() if self.found not in (None, UNSEEN) else "a process the advisor cannot see"
        found = f"the engine found serving port {s.port} ({who})"
        why = self._fresh_baseline_room()
        if why and busy:
            raise LaunchError(f"{found} carries outside traffic ({busy}): as the baseline arm its users would load that "
                              "arm alone and the host the load generator runs on; a fresh baseline replica beside the "
                              f"candidate does not fit this host ({why}). Choose: --baseline found measures it anyway "
                              "(its outside traffic counted and reported per block), or move its users away, or run "
                              "where a replica fits")
        if why:
            raise LaunchError(f"no room for a fresh baseline replica beside the candidate: {why}")
        self.baseline_port = _free_port(s.host, avoid=range(s.candidate_port, s.candidate_port + self.replicas["candidate"]))
        self.notes.append(f"the baseline arm is a fresh replica on port {self.baseline_port}, started like the "
                          f"candidate, not {found}: "
                          + (f"it carries outside traffic ({busy})" if busy else "asked for (--baseline fresh)"))

    def _fresh_baseline_room(self) -> str | None:
        """Why the found engine, a fresh baseline and the candidate cannot serve at once here, or None."""
        host = room.Host.this()
        cores = room.engine_cores(self.dep.engine, [*self.spec.command, *self.args["baseline"]],
                                  self.env["baseline"], host)
        per_engine = resident_bytes(self.spec.port).rss
        fresh = self.replicas["baseline"] + self.replicas["candidate"]
        return room.refusal(self.replicas["baseline"] + fresh, fresh, cores, per_engine, host)

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
                "baseline_replica": self.baseline_port if self.replica else None,
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

    def _raise_if_died(self, arm: str) -> None:
        for key in self._keys(arm):
            # Started and never stopped by us, and gone: it died while the other arm ran. Starting it
            # again would hide the failure, and a fresh engine is not the arm that ran the blocks.
            rec = self.started[key]
            if not rec.alive():
                raise LaunchError(f"the {_named(key)} engine (pid {rec.pid}) died between its blocks")

    def _raise_if_silent(self, arm: str, url: str) -> None:
        """An engine of ours that answered at the end of its last block and no longer does has
        failed between its blocks (killed, hung, dying): restarting it would hide that, as a death
        would be (a CI run judged "improved" on a candidate it had restarted after a SIGKILL that
        landed just after the died check). Asked twice, a second apart: one slow answer is not a
        failure."""
        for wait in (0.0, SETTLE_S):
            time.sleep(wait)
            self._raise_if_died(arm)
            if healthy(url, self.spec.health_path):
                return
        raise LaunchError(f"the {_named(arm)} engine at {url} stopped answering {self.spec.health_path} "
                          "between its blocks")

    def _settled_holder(self, arm: str) -> ProcessRecord | None:
        """Who holds the arm's port, read again for a moment when it looks like nobody's: an engine
        of ours that is being killed keeps its listening socket for a few milliseconds after its pid
        stops naming it, and would be taken for a stranger's process."""
        now = self._holder(arm)
        deadline = time.monotonic() + SETTLE_S
        while now is not None and self._whose(now) is None and time.monotonic() < deadline:
            time.sleep(0.05)
            self._raise_if_died(arm)
            now = self._holder(arm)
        return now

    def bring_up(self, arm: str) -> str:
        url = self.url(arm)
        self._raise_if_died(arm)
        if self.spec.arms == "sequential":  # the other arm's further replicas would outlive its switch
            other = "candidate" if arm == "baseline" else "baseline"
            for key in self._keys(other):
                if "/" in key:
                    self._stop_mine(key)
        start: list[int] = []
        now = self._settled_holder(arm)
        if now is not None:
            whose = self._whose(now)
            if whose == arm and arm in self.started:
                self._raise_if_silent(arm, url)
            elif not ((whose == arm or (arm == "baseline" and whose == "found")) and healthy(url, self.spec.health_path)):
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
            outcome = stop_recorded(found, owned=True)
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
        placed = self.placement.get(arm) or []
        # Built on purpose: none of the advisor's secrets, and the mark that lets `advisor recover`
        # prove the process is this experiment's (ownership.py).
        env = child_env.for_child({**self.env[arm], **(placed[replica] if replica < len(placed) else {}),
                                   **self.ownership.env(self.experiment)})
        argv = self.argv(arm, replica)
        self.starts += 1
        try:
            # Detached (its own session): a restored baseline must keep serving after the advisor exits.
            proc = children.spawn(argv, log_path, env=env)
        except FileNotFoundError:
            raise LaunchError(f"cannot start the {name} engine: program {argv[0]!r} not found (local.command is "
                              "a list of words, the program first)") from None
        except PermissionError:
            raise LaunchError(f"cannot start the {name} engine: {argv[0]!r} is not executable") from None
        # A record that never matches a live process when this one could not be read: never signalled.
        rec = replace(ProcessRecord.of(proc.pid) or ProcessRecord(proc.pid, -1.0, tuple(argv)), session=True)
        self.started[key] = rec
        self.journal.write(self.experiment, "starting", arm=self._label(arm), **rec.entry(), argv=argv,
                           log=str(log_path), **extra)
        return arm, replica, key, name, extra, proc, rec, log_path, time.monotonic() + self.spec.start_timeout_s

    def _await(self, arm: str, replica: int, key: str, name: str, extra: dict, proc,
               rec: ProcessRecord, log_path: Path, deadline: float) -> None:
        url = self.url(arm, replica)
        started = engine_process.wait_healthy(proc, url, self.spec.health_path, deadline - time.monotonic())
        if started == "exited":
            self.started.pop(key, None)
            self.journal.write(self.experiment, "exited", arm=self._label(arm), pid=proc.pid,
                               code=proc.returncode, **extra)
            raise LaunchError(f"the {name} engine exited with code {proc.returncode} while starting; "
                              f"last log lines: {_tail(log_path)}")
        if started == "healthy":
            placement = isolate_engine_core(proc.pid) if self.spec.isolate_engine_core else None
            # Read again once serving: an engine may retitle itself while it starts.
            self.started[key] = replace(ProcessRecord.of(proc.pid) or rec, session=True)
            unmarked = self.ownership.verify(proc.pid, self.experiment)
            if unmarked:
                self.notes.append(f"the {name} engine (pid {proc.pid}) cannot be shown to be the advisor's "
                                  f"({unmarked}; does local.command clear the environment?): if the advisor "
                                  "dies, `advisor recover` will leave it running")
            self.journal.write(self.experiment, "started", arm=self._label(arm), **self.started[key].entry(),
                               placement=placement, marked=unmarked is None, **extra)
            return
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


def _free_port(host: str, avoid: range) -> int:
    """A port free on host now, outside `avoid` (the candidate's replicas)."""
    for _ in range(100):
        with socket.socket() as sock:
            sock.bind((host, 0))
            port = sock.getsockname()[1]
        if port not in avoid and holder(port) is None:
            return port
    raise LaunchError(f"no free port found on {host} for a fresh baseline replica")


def _named(key: str) -> str:
    """'candidate' for an arm's first replica, 'candidate replica 2' for its second."""
    arm, _, i = key.partition("/")
    return f"{arm} replica {int(i) + 1}" if i else arm


def _tail(path: Path, n: int = 8) -> str:
    """The log's last lines on one line, as quoted in an error (redacted: engine_process.log_tail)."""
    lines = engine_process.log_tail(path, n)
    return "(no log)" if lines is None else " | ".join(line.rstrip() for line in lines)
