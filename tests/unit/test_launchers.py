"""Launchers, journal, lock and recovery with a fake engine process (a real process on loopback):
the baseline is left as it was found, on success, abort and after a crash."""

import os
import signal
import sys

import httpx
import psutil
import pytest

from advisor.experiments.deployment import Deployment
from advisor.experiments.journal import Busy, Journal, TargetLock
from advisor.experiments.launchers import LocalLauncher, healthy, listener, stop_pid
from advisor.experiments.recovery import recover
from tests.support.servers import ROOT, free_port


def deployment(arms: str, port: int, cport: int | None = None) -> Deployment:
    return Deployment.model_validate({
        "name": "fake", "engine": "vllm", "model": "fake", "launcher": "local",
        "local": {"command": [sys.executable, "-m", "tests.support.fake_openai"], "args": ["--max-num-seqs", "2"],
                  "port": port, "candidate_port": cport, "arms": arms, "start_timeout_s": 20}})


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


def test_sequential_arms_swap_and_restore(tmp_path, cleanup):
    port = free_port()
    cleanup.append(port)
    dep = deployment("sequential", port)
    journal = Journal(tmp_path)
    start_baseline(dep, tmp_path, journal)
    lau = LocalLauncher(dep, ["--max-num-seqs", "8"], {}, journal, "e1", tmp_path / "logs")
    assert lau.found_serving
    url = lau.bring_up("candidate")
    assert argv_at(url) == ["--max-num-seqs", "8"]
    lau.bring_up("baseline")
    assert argv_at(lau.url("baseline")) == ["--max-num-seqs", "2"]
    lau.bring_up("candidate")
    lau.restore()
    assert healthy(lau.url("baseline")) and argv_at(lau.url("baseline")) == ["--max-num-seqs", "2"]


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


def test_dead_candidate_is_reported_and_restore_still_works(tmp_path, cleanup):
    port, cport = free_port(), free_port()
    cleanup += [port, cport]
    dep = deployment("parallel", port, cport)
    journal = Journal(tmp_path)
    start_baseline(dep, tmp_path, journal)
    lau = LocalLauncher(dep, ["--x"], {}, journal, "e3", tmp_path / "logs")
    lau.bring_up("candidate")
    os.kill(lau.started["candidate"], signal.SIGKILL)
    psutil.Process(lau.started["candidate"]).wait(5) if psutil.pid_exists(lau.started["candidate"]) else None
    assert "died" in lau.check("candidate") or "unhealthy" in lau.check("candidate")
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
    dep = deployment("sequential", port)
    journal = Journal(tmp_path)
    start_baseline(dep, tmp_path, journal)
    journal.write("boot", "recovered")  # the boot launcher's own entries are closed
    lau = LocalLauncher(dep, ["--max-num-seqs", "8"], {}, journal, "e5", tmp_path / "logs")
    journal.write("e5", "begin", found_serving=True)
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
    from advisor.experiments.launchers import LaunchError

    port = free_port()
    lau = LocalLauncher(deployment("sequential", port), ["--port-typo-makes-argparse-fail", "--tokens", "x"], {},
                        Journal(tmp_path), "e6", tmp_path / "logs")
    with pytest.raises(LaunchError, match="exited with code"):
        lau.bring_up("candidate")
