"""Launchers, journal, lock and recovery with a fake engine process (a real process on loopback):
the baseline is left as it was found, on success, abort and after a crash."""

import os
import signal
import sys

import httpx
import psutil
import pytest

from advisor.experiments.design.deployment import Deployment
from advisor.experiments.arms.journal import Busy, Journal, TargetLock
from advisor.experiments.arms.protocol import LaunchError
from advisor.experiments.arms.local import LocalLauncher
from advisor.engine_process import healthy
from advisor.children import stop_pid
from advisor.experiments.arms.recovery import recover
from tests.support.servers import ROOT, free_port, listener


def deployment(arms: str, port: int, cport: int | None = None, owns: bool = False,
               bport: int | None = None) -> Deployment:
    return Deployment.model_validate({
        "name": "fake", "engine": "vllm", "model": "fake", "launcher": "local",
        "local": {"command": [sys.executable, "-m", "tests.support.fake_openai"], "args": ["--max-num-seqs", "2"],
                  "port": port, "candidate_port": cport, "arms": arms, "start_timeout_s": 20,
                  "owns_process": owns, "baseline_port": bport}})


def argv_at(url: str) -> list[str]:
    return httpx.get(url + "/argv").json()["argv"]


@pytest.fixture(autouse=True)
def _cwd(monkeypatch):
    monkeypatch.chdir(ROOT)  # the fake engine runs as `python -m tests.support.fake_openai`


@pytest.fixture
def cleanup():
    ports = []
    yield ports
    for p in ports:
        pid = listener(p)
        if pid:
            stop_pid(pid)


def start_baseline(dep: Deployment, tmp_path, journal) -> LocalLauncher:
    boot = LocalLauncher(dep, [], {}, journal, "boot", tmp_path / "logs")
    boot._start("baseline")
    return boot


def parallel_arms(tmp_path, cleanup, experiment: str, flags: list[str]) -> tuple[LocalLauncher, int, int]:
    """(a launcher whose candidate is up beside a baseline it found serving, baseline port, candidate port)."""
    port, cport = free_port(), free_port()
    cleanup += [port, cport]
    dep = deployment("parallel", port, cport)
    journal = Journal(tmp_path)
    start_baseline(dep, tmp_path, journal)
    lau = LocalLauncher(dep, flags, {}, journal, experiment, tmp_path / "logs")
    lau.bring_up("candidate")
    return lau, port, cport


def test_sequential_arms_swap_and_restore(tmp_path, cleanup):
    # The baseline found serving was started by someone else: owns_process lets the advisor replace it.
    port = free_port()
    cleanup.append(port)
    dep = deployment("sequential", port, owns=True)
    journal = Journal(tmp_path)
    start_baseline(dep, tmp_path, journal)
    found_pid = listener(port)
    lau = LocalLauncher(dep, ["--max-num-seqs", "8"], {}, journal, "e1", tmp_path / "logs")
    assert lau.found_serving and lau.found.pid == found_pid
    lau.preflight()
    url = lau.bring_up("candidate")
    assert argv_at(url) == ["--max-num-seqs", "8"]
    lau.bring_up("baseline")
    assert argv_at(lau.url("baseline")) == ["--max-num-seqs", "2"]
    lau.bring_up("candidate")
    lau.restore()
    assert healthy(lau.url("baseline")) and argv_at(lau.url("baseline")) == ["--max-num-seqs", "2"]
    assert listener(port) != found_pid and not lau.found.alive(), "the found process was replaced"
    stops = [e for e in journal.entries("e1") if e["event"] == "stopping" and e["who"] == "found"]
    assert [(e["pid"], e["cmdline"]) for e in stops] == [(found_pid, lau.found.entry()["cmdline"])]


def test_sequential_refuses_a_port_held_by_a_process_it_does_not_own(tmp_path, cleanup):
    port = free_port()
    cleanup.append(port)
    dep = deployment("sequential", port)
    journal = Journal(tmp_path)
    start_baseline(dep, tmp_path, journal)
    found_pid = listener(port)
    lau = LocalLauncher(dep, ["--max-num-seqs", "8"], {}, journal, "e1b", tmp_path / "logs")
    with pytest.raises(LaunchError, match=f"port {port} is held by pid {found_pid} .*owns_process: true"):
        lau.preflight()
    with pytest.raises(LaunchError, match="did not start"):
        lau.bring_up("candidate")
    assert listener(port) == found_pid and argv_at(lau.url("baseline")) == ["--max-num-seqs", "2"]


def test_parallel_arms_never_stop_the_baseline(tmp_path, cleanup):
    port, cport = free_port(), free_port()
    cleanup += [port, cport]
    dep = deployment("parallel", port, cport)
    journal = Journal(tmp_path)
    start_baseline(dep, tmp_path, journal)
    base_pid = listener(port)
    lau = LocalLauncher(dep, ["--max-num-seqs", "8"], {}, journal, "e2", tmp_path / "logs")
    lau.bring_up("candidate")
    assert argv_at(lau.url("candidate")) == ["--max-num-seqs", "8"]
    lau.restore()
    assert listener(port) == base_pid and listener(cport) is None


def test_a_fresh_baseline_replica_is_measured_and_the_process_found_serving_is_never_touched(tmp_path, cleanup):
    port, cport, bport = free_port(), free_port(), free_port()
    cleanup += [port, cport, bport]
    dep = deployment("parallel", port, cport, bport=bport)
    journal = Journal(tmp_path)
    start_baseline(deployment("parallel", port, cport), tmp_path, journal)  # someone else's, on port
    found = listener(port)
    lau = LocalLauncher(dep, ["--max-num-seqs", "8"], {}, journal, "e6", tmp_path / "logs")
    lau.preflight()  # a process it does not own on port is no reason to refuse: it will not be touched
    assert lau.bring_up("baseline").endswith(f":{bport}") and lau.bring_up("candidate").endswith(f":{cport}")
    assert argv_at(lau.url("baseline")) == ["--max-num-seqs", "2"]
    assert argv_at(lau.url("candidate")) == ["--max-num-seqs", "8"]
    assert "not touched" in lau.restore()
    assert listener(port) == found and listener(bport) is None and listener(cport) is None
    arms = {e.get("arm") for e in journal.entries("e6") if e["event"] == "starting"}
    assert arms == {"baseline replica", "candidate"}, "recovery must not mistake the replica for the baseline"


def test_a_replica_left_by_a_dead_advisor_is_stopped_and_the_found_process_kept(tmp_path, cleanup):
    port, cport, bport = free_port(), free_port(), free_port()
    cleanup += [port, cport, bport]
    dep = deployment("parallel", port, cport, bport=bport)
    journal = Journal(tmp_path)
    start_baseline(deployment("parallel", port, cport), tmp_path, journal)
    journal.write("boot", "recovered")
    found = listener(port)
    lau = LocalLauncher(dep, ["--max-num-seqs", "8"], {}, journal, "e7", tmp_path / "logs")
    journal.write("e7", "begin", **lau.found_state())
    lau.bring_up("baseline")  # ...and the advisor dies here, its replica serving
    note = recover(dep, journal, tmp_path / "logs")
    assert "baseline replica stopped" in note and "baseline healthy" in note, note
    assert listener(bport) is None and listener(port) == found


def test_baseline_port_needs_parallel_arms_and_a_port_of_its_own():
    with pytest.raises(ValueError, match="baseline_port needs arms: parallel"):
        deployment("sequential", 8000, bport=8002)
    with pytest.raises(ValueError, match="baseline_port must differ"):
        deployment("parallel", 8000, 8001, bport=8001)


def test_dead_candidate_is_reported_and_restore_still_works(tmp_path, cleanup):
    lau, _, cport = parallel_arms(tmp_path, cleanup, "e3", ["--x"])
    pid = lau.started["candidate"].pid
    os.kill(pid, signal.SIGKILL)
    psutil.Process(pid).wait(5) if psutil.pid_exists(pid) else None
    assert "died" in lau.check("candidate") or "unhealthy" in lau.check("candidate")
    lau.bring_up("baseline")
    with pytest.raises(LaunchError, match=f"the candidate engine \\(pid {pid}\\) died between its blocks"):
        lau.bring_up("candidate")  # never quietly started again
    assert listener(cport) is None
    lau.restore()
    assert healthy(lau.url("baseline"))


def test_not_serving_at_start_means_not_serving_after(tmp_path, cleanup):
    port = free_port()
    cleanup.append(port)
    lau = LocalLauncher(deployment("sequential", port), ["--x"], {}, Journal(tmp_path), "e4", tmp_path / "logs")
    assert not lau.found_serving
    lau.bring_up("baseline")
    lau.bring_up("candidate")
    lau.restore()
    assert listener(port) is None


def test_crash_mid_experiment_is_recovered_at_next_start(tmp_path, cleanup):
    port = free_port()
    cleanup.append(port)
    dep = deployment("sequential", port, owns=True)
    journal = Journal(tmp_path)
    start_baseline(dep, tmp_path, journal)
    journal.write("boot", "recovered")  # the boot launcher's own entries are closed
    lau = LocalLauncher(dep, ["--max-num-seqs", "8"], {}, journal, "e5", tmp_path / "logs")
    journal.write("e5", "begin", **lau.found_state())
    lau.bring_up("candidate")  # ...and the advisor dies here, candidate serving on the target port
    assert argv_at(lau.url("baseline")) == ["--max-num-seqs", "8"]
    assert journal.pending()[0] == "e5"
    note = recover(dep, journal, tmp_path / "logs")
    assert "baseline restarted" in note
    assert argv_at(lau.url("baseline")) == ["--max-num-seqs", "2"]
    assert journal.pending() is None
    assert recover(dep, journal, tmp_path / "logs") is None


def test_one_experiment_per_target(tmp_path):
    with TargetLock(tmp_path):
        with pytest.raises(Busy, match="another experiment holds this target"):
            with TargetLock(tmp_path):
                pass
    with TargetLock(tmp_path):
        pass


def test_journal_survives_a_torn_line(tmp_path):
    j = Journal(tmp_path)
    j.write("x", "begin")
    with open(j.path, "a") as f:
        f.write('{"t": 1, "experiment": "x", "ev')
    assert j.pending()[0] == "x"


def test_failed_start_is_a_clear_error(tmp_path):
    port = free_port()
    lau = LocalLauncher(deployment("sequential", port), ["--port-typo-makes-argparse-fail", "--tokens", "x"], {},
                        Journal(tmp_path), "e6", tmp_path / "logs")
    with pytest.raises(LaunchError, match="exited with code"):
        lau.bring_up("candidate")


@pytest.fixture
def two_cores(monkeypatch):
    """The room check sees the 2-core, GPU-less host these tests were written on, whatever runs them."""
    from advisor.experiments.arms import room

    monkeypatch.setattr(room.Host, "this", classmethod(lambda cls: cls(cores=2, available_bytes=20 * 2**30)))


def replicas_deployment(port: int, cport: int, engine: str = "llamacpp") -> Deployment:
    return Deployment.model_validate({
        "name": "fake", "engine": engine, "model": "fake", "launcher": "local",
        "local": {"command": [sys.executable, "-m", "tests.support.fake_openai"], "args": ["-t", "1"],
                  "port": port, "candidate_port": cport, "arms": "parallel", "start_timeout_s": 20}})


def test_a_candidate_of_n_plus_one_replicas_serves_from_its_port_up_and_all_are_stopped(tmp_path, cleanup, two_cores):
    from advisor.localstack.paths import free_port as free_run

    port, cport = free_port(), free_run(2)
    cleanup += [port, cport, cport + 1]
    dep = replicas_deployment(port, cport)
    journal = Journal(tmp_path)
    start_baseline(dep, tmp_path, journal)
    base_pid = listener(port)
    lau = LocalLauncher(dep, ["-t", "1"], {}, journal, "r1", tmp_path / "logs", candidate_replicas=2)
    lau.preflight()
    assert lau.bring_up("candidate") == f"http://127.0.0.1:{cport}"
    assert lau.urls("candidate") == [f"http://127.0.0.1:{cport}", f"http://127.0.0.1:{cport + 1}"]
    assert lau.urls("baseline") == [f"http://127.0.0.1:{port}"]
    assert [argv_at(u) for u in lau.urls("candidate")] == [["-t", "1"], ["-t", "1"]], "the same argv on each"
    assert lau.check("candidate") is None
    assert lau.bring_up("candidate") and lau.starts == 2, "replicas already serving are not restarted"
    two, one = lau.resident_bytes("candidate").rss, lau.resident_bytes("baseline").rss
    assert two > 1.5 * one, (two, one)
    stop_pid(listener(cport + 1))
    assert lau.check("candidate").startswith("the candidate replica 2 engine (pid ")
    with pytest.raises(LaunchError, match="the candidate replica 2 engine .* died between its blocks"):
        lau.bring_up("candidate")  # never quietly started again
    lau.restore()
    assert listener(port) == base_pid and listener(cport) is None and listener(cport + 1) is None
    starts = [e.get("replica") for e in journal.entries("r1") if e["event"] == "starting"]
    assert starts == [None, 2]


def test_replicas_left_by_a_dead_advisor_are_all_stopped(tmp_path, cleanup, two_cores):
    from advisor.localstack.paths import free_port as free_run

    port, cport = free_port(), free_run(2)
    cleanup += [port, cport, cport + 1]
    dep = replicas_deployment(port, cport)
    journal = Journal(tmp_path)
    start_baseline(dep, tmp_path, journal)
    journal.write("boot", "recovered")
    found = listener(port)
    lau = LocalLauncher(dep, ["-t", "1"], {}, journal, "r2", tmp_path / "logs", candidate_replicas=2)
    journal.write("r2", "begin", **lau.found_state())
    lau.bring_up("candidate")  # ...and the advisor dies here, both replicas serving
    note = recover(dep, journal, tmp_path / "logs")
    assert note.count("candidate stopped") == 2 and "baseline healthy" in note, note
    assert listener(cport) is None and listener(cport + 1) is None and listener(port) == found


def test_replicas_are_refused_before_anything_starts_where_the_host_has_no_room(tmp_path, cleanup, two_cores):
    from advisor.localstack.paths import free_port as free_run

    port, cport = free_port(), free_run(2)
    cleanup.append(port)
    dep = replicas_deployment(port, cport)
    journal = Journal(tmp_path)
    start_baseline(dep, tmp_path, journal)
    lau = LocalLauncher(dep, ["-t", "2"], {}, journal, "r3", tmp_path / "logs", candidate_replicas=2)
    with pytest.raises(LaunchError, match=r"no room on this host for the replicas experiment: 2 replicas of 2 core\(s\) "
                                          r"each \(llama-server -t\) need 4 cores; this host has 2"):
        lau.preflight()
    assert listener(cport) is None and lau.starts == 0


def test_vllm_cpu_replicas_each_get_their_own_cores_where_the_host_has_them(tmp_path, cleanup, monkeypatch):
    """vLLM's CPU worker binds its threads (auto: all cores but one): every replica would take the
    same cores, so on a host with room each replica of the candidate is given its own."""
    from advisor.experiments.arms import room
    from advisor.localstack.paths import free_port as free_run

    # The baseline's worker has 1 core (auto on 2 cores); this host has 4 for the 2 replicas and a spare each.
    monkeypatch.setattr(room, "engine_cores", lambda *a: room.EngineCores(1, "auto", True, "VLLM_CPU_OMP_THREADS_BIND",
                                                                         reserved=1))
    monkeypatch.setattr(room.Host, "this", classmethod(lambda cls: cls(cores=4, available_bytes=20 * 2**30)))
    port, cport = free_port(), free_run(2)
    cleanup += [port, cport, cport + 1]
    dep = replicas_deployment(port, cport, engine="vllm")
    journal = Journal(tmp_path)
    start_baseline(dep, tmp_path, journal)
    lau = LocalLauncher(dep, ["-t", "1"], {}, journal, "r5", tmp_path / "logs", candidate_replicas=2)
    lau.preflight()
    lau.bring_up("candidate")
    assert [httpx.get(u + "/bind").json()["bind"] for u in lau.urls("candidate")] == ["0", "2"]
    assert httpx.get(lau.url("baseline") + "/bind").json()["bind"] is None, "the baseline keeps its own binding"
    assert any("VLLM_CPU_OMP_THREADS_BIND=0, VLLM_CPU_OMP_THREADS_BIND=2" in n for n in lau.notes), lau.notes
    lau.restore()


def test_vllm_cpu_replicas_are_refused_on_two_cores(tmp_path, cleanup, two_cores):
    from advisor.localstack.paths import free_port as free_run

    port, cport = free_port(), free_run(2)
    cleanup.append(port)
    dep = replicas_deployment(port, cport, engine="vllm")
    journal = Journal(tmp_path)
    start_baseline(dep, tmp_path, journal)
    lau = LocalLauncher(dep, [], {}, journal, "r6", tmp_path / "logs", candidate_replicas=2)
    with pytest.raises(LaunchError, match=r"no room on this host for the replicas experiment: 2 replicas of 2 core\(s\) "
                                          r"each \(vLLM's CPU worker binds all cores but one"):
        lau.preflight()


def test_a_replica_port_held_by_someone_else_is_refused_by_name(tmp_path, cleanup, two_cores):
    from advisor.localstack.paths import free_port as free_run

    port, cport = free_port(), free_run(2)
    cleanup += [port, cport + 1]
    dep = replicas_deployment(port, cport)
    journal = Journal(tmp_path)
    start_baseline(dep, tmp_path, journal)
    LocalLauncher(replicas_deployment(cport + 1, cport + 5), [], {}, journal, "other", tmp_path / "logs")._start(
        "baseline")
    lau = LocalLauncher(dep, ["-t", "1"], {}, journal, "r4", tmp_path / "logs", candidate_replicas=2)
    with pytest.raises(LaunchError, match=rf"port {cport + 1} \(candidate_port \+ 1, for the candidate's replica 2\) "
                                          "is held by pid"):
        lau.preflight()


def test_a_candidate_killed_as_its_arm_comes_up_is_said_to_have_died_not_taken_for_a_stranger(
        tmp_path, cleanup, monkeypatch):
    """SIGKILL tears an engine down in steps: for a few milliseconds its listening socket outlives
    the pid that named it, and the port reads as held by a process nobody can see. A CI run aborted
    with "port N is held by a process the advisor cannot see" for the candidate it had just lost."""
    from advisor.experiments.arms import local
    from advisor.experiments.arms.processes import UNSEEN

    lau, port, cport = parallel_arms(tmp_path, cleanup, "e9", ["--max-num-seqs", "8"])
    lau.bring_up("baseline")
    pid, real = listener(cport), local.holder

    def dying(p: int):
        # The kill lands after bring_up's first died check, and the port is read in that moment.
        if p != cport:
            return real(p)
        if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        return UNSEEN

    monkeypatch.setattr(local, "holder", dying)
    with pytest.raises(LaunchError, match=r"candidate engine \(pid \d+\) died between its blocks"):
        lau.bring_up("candidate")
    monkeypatch.undo()
    lau.restore()


def test_a_candidate_killed_while_its_health_is_read_is_never_restarted(tmp_path, cleanup, monkeypatch):
    """The kill lands after bring_up's died checks, while it asks the candidate's health: a CI run
    restarted the candidate then, and judged 'improved' on an arm that had died between its blocks."""
    from advisor.experiments.arms import local

    lau, _, cport = parallel_arms(tmp_path, cleanup, "e10", ["--max-num-seqs", "8"])
    lau.bring_up("baseline")
    pid, starts, real = listener(cport), lau.starts, local.healthy

    def killed_as_asked(url: str, path: str = "/health", timeout: float = 5.0) -> bool:
        if url == lau.url("candidate") and psutil.pid_exists(pid) \
                and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            # Its process group: the launcher starts each engine in a session of its own
            # (children.spawn), and only that engine, this test's, is in it.
            os.killpg(os.getpgid(pid), signal.SIGKILL)
            return False
        return real(url, path, timeout)

    monkeypatch.setattr(local, "healthy", killed_as_asked)
    with pytest.raises(LaunchError, match=rf"candidate engine \(pid {pid}\) died between its blocks"):
        lau.bring_up("candidate")
    assert lau.starts == starts and listener(cport) is None
    monkeypatch.undo()
    lau.restore()
    assert healthy(lau.url("baseline"))


def test_a_candidate_that_stops_answering_between_its_blocks_aborts_and_is_not_replaced(tmp_path, cleanup,
                                                                                         monkeypatch):
    from advisor.experiments.arms import local

    lau, _, cport = parallel_arms(tmp_path, cleanup, "e11", ["--max-num-seqs", "8"])
    pid, starts, real = listener(cport), lau.starts, local.healthy
    asked = []

    def hung(url: str, path: str = "/health", timeout: float = 5.0) -> bool:
        if url == lau.url("candidate"):
            asked.append(url)
            return False
        return real(url, path, timeout)

    monkeypatch.setattr(local, "healthy", hung)
    with pytest.raises(LaunchError, match=rf"the candidate engine at {lau.url('candidate')} stopped answering "
                                          "/health between its blocks"):
        lau.bring_up("candidate")
    assert len(asked) == 2, "one slow answer is not a failure: asked again a second later"
    assert lau.starts == starts and listener(cport) == pid, "left for the restore, not restarted"
    monkeypatch.undo()
    lau.restore()
    assert listener(cport) is None and healthy(lau.url("baseline"))
