"""Process ownership, on real processes and the real command line: an experiment and `advisor
recover` stop only what the advisor started and journalled (pid, create time, command line, checked
before any signal), never what they merely find listening, unless the deployment says the advisor
owns that process (`local.owns_process: true`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import yaml

from advisor.experiments.design.deployment import load_deployment
from advisor.experiments.arms.journal import Journal
from advisor.engine_process import healthy
from advisor.children import stop_pid
from advisor.experiments.arms.processes import ProcessRecord
from tests.support.cli import assert_one_line_error, run_cli
from tests.support.servers import ROOT, fake_argv, free_port, listener, wait_healthy

FAKE = [sys.executable, "-m", "tests.support.fake_openai"]
# A median primary: the knob's own p99 would need 500 requests per block for its tail (and is refused
# with the numbers at 8); these tests are about processes, not verdicts.
QUICK = ("--mechanism", "max_num_seqs", "--value", "8", "--blocks", "2", "--block-requests", "8", "--warmup", "2",
         "--concurrency", "2", "--no-save", "--readout", "ttft_p50")


@contextmanager
def process(argv: list[str], port: int | None = None, health: bool = True) -> Iterator[subprocess.Popen]:
    """A process the advisor did not start (this test did), stopped when the block ends."""
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if port is not None:
            deadline = time.monotonic() + 15
            while listener(port) is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if health:
                wait_healthy(f"http://127.0.0.1:{port}")
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def http_server(port: int):
    return process([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], port, health=False)


def fake(port: int, *extra: str):
    return process(fake_argv(port, *extra), port)


def untouched(proc: subprocess.Popen, port: int) -> None:
    """Still running, still the listener, still answering."""
    assert proc.poll() is None, "the process the advisor did not start was stopped"
    assert listener(port) == proc.pid
    assert httpx.get(f"http://127.0.0.1:{port}/", timeout=5).status_code in (200, 404)


def dep_file(tmp_path: Path, port: int, arms: str = "sequential", **local) -> Path:
    spec = {"name": "d", "engine": "vllm", "model": "fake", "launcher": "local",
            "local": {"command": FAKE, "args": ["--max-num-seqs", "2"], "port": port, "arms": arms,
                      "start_timeout_s": 20, **({"candidate_port": free_port()} if arms == "parallel" else {}),
                      **local}}
    p = tmp_path / "dep.yaml"
    p.write_text(yaml.safe_dump(spec))
    return p


def journal_of(tmp_path: Path, dep: Path) -> Journal:
    return Journal(tmp_path / "data" / "experiments" / load_deployment(dep).key)


def cli(tmp_path: Path, *args: str, timeout: float = 120):
    return run_cli(*args, data_dir=tmp_path / "data", timeout=timeout)


@pytest.fixture
def ports() -> Iterator[list[int]]:
    """Ports whose listener the test stops at the end (what the advisor left serving)."""
    used: list[int] = []
    yield used
    for p in used:
        pid = listener(p)
        if pid:
            stop_pid(pid)


def unwrapped(text: str) -> str:
    return " ".join(text.split())


def argv_at(port: int) -> list[str]:
    return httpx.get(f"http://127.0.0.1:{port}/argv", timeout=5).json()["argv"]


# -- what it finds listening ------------------------------------------------------------------------

@pytest.mark.parametrize("server", ["http.server", "fake_openai"])
def test_sequential_refuses_a_port_held_by_a_process_it_did_not_start(tmp_path, server):
    port = free_port()
    dep = dep_file(tmp_path, port)
    with (http_server(port) if server == "http.server" else fake(port)) as proc:
        r = cli(tmp_path, "experiment", "--deployment", str(dep), *QUICK)
        assert_one_line_error(r, 2, contains=f"port {port} is held by pid {proc.pid}")
        said = unwrapped(r.stderr)  # a piped stderr is wrapped at 140 columns
        assert server in said and "local.owns_process: true" in said and "arms: parallel" in said, said
        untouched(proc, port)
        assert not any(e["event"] == "begin" for e in journal_of(tmp_path, dep).entries()), "nothing started"
        r = cli(tmp_path, "recover", "--deployment", str(dep))
        assert r.code == 0 and "nothing to recover" in r.stdout, r.stderr
        untouched(proc, port)


def test_parallel_uses_a_baseline_it_did_not_start_and_never_stops_it(tmp_path):
    port = free_port()
    dep = dep_file(tmp_path, port, arms="parallel")
    cport = yaml.safe_load(dep.read_text())["local"]["candidate_port"]
    with fake(port) as proc:
        r = cli(tmp_path, "experiment", "--deployment", str(dep), *QUICK, "--output", "json")
        assert r.code == 0, r.stderr
        result = json.loads(r.stdout)
        assert result["status"] == "finished" and result["baseline_restored"], result
        untouched(proc, port)
        assert argv_at(port) == [] and listener(cport) is None
        begin = next(e for e in journal_of(tmp_path, dep).entries() if e["event"] == "begin")
        assert begin["found_serving"] and begin["found"]["pid"] == proc.pid
        assert begin["found"]["create_time"] == ProcessRecord.of(proc.pid).create_time
        r = cli(tmp_path, "recover", "--deployment", str(dep))
        assert r.code == 0 and "nothing to recover" in r.stdout
        untouched(proc, port)


def test_parallel_refuses_ports_held_by_what_it_cannot_use(tmp_path):
    port = free_port()
    dep = dep_file(tmp_path, port, arms="parallel")
    cport = yaml.safe_load(dep.read_text())["local"]["candidate_port"]
    with http_server(port) as proc:  # holds the baseline's port without answering /health
        r = cli(tmp_path, "experiment", "--deployment", str(dep), *QUICK)
        assert_one_line_error(r, 2, contains=f"port {port} is held by pid {proc.pid}")
        untouched(proc, port)
    with fake(port) as base, http_server(cport) as other:
        r = cli(tmp_path, "experiment", "--deployment", str(dep), *QUICK)
        assert_one_line_error(r, 2, contains=f"candidate_port {cport} is held by pid {other.pid}")
        untouched(base, port)
        untouched(other, cport)


def test_owns_process_lets_it_replace_the_found_process_and_restore_the_baseline(tmp_path, ports):
    port = free_port()
    ports.append(port)
    dep = dep_file(tmp_path, port, owns_process=True)
    with fake(port, "--max-num-seqs", "2") as found:
        r = cli(tmp_path, "experiment", "--deployment", str(dep), *QUICK, "--output", "json")
        assert r.code == 0, r.stderr
        result = json.loads(r.stdout)
        assert result["status"] == "finished" and result["baseline_restored"], result
        assert found.wait(5) is not None, "the owned process was stopped"
        assert healthy(f"http://127.0.0.1:{port}") and argv_at(port) == ["--max-num-seqs", "2"]
        assert listener(port) != found.pid
        entries = journal_of(tmp_path, dep).entries()
        assert entries[0]["event"] == "begin" and entries[0]["found"]["pid"] == found.pid
        stop = next(e for e in entries if e["event"] == "stopping" and e["who"] == "found")
        assert stop["create_time"] == entries[0]["found"]["create_time"]


# -- prompts that cannot be sized against a baseline it found serving --------------------------------

@pytest.mark.parametrize("arms, owns", [("parallel", False), ("sequential", True)])
def test_unsizable_prompts_are_one_line_and_the_found_baseline_is_left_alone(tmp_path, arms, owns):
    port = free_port()
    dep = dep_file(tmp_path, port, arms=arms, owns_process=owns)
    with fake(port, "--tokenize-count", "1") as found:
        r = cli(tmp_path, "experiment", "--deployment", str(dep), *QUICK)
        assert_one_line_error(r, 2, contains="common words are one token each")
        untouched(found, port)
        assert journal_of(tmp_path, dep).pending() is None, "the journal is closed: the target was left as found"


# -- what the journal says it started ------------------------------------------------------------------

def pending_journal(tmp_path: Path, dep: Path, rec: ProcessRecord, found_serving: bool = False, **extra) -> Journal:
    j = journal_of(tmp_path, dep)
    j.write("exp-x", "begin", found_serving=found_serving, **extra)
    j.write("exp-x", "starting", arm="candidate", **rec.entry())
    return j


@pytest.mark.parametrize("change", ["create_time", "cmdline"])
def test_recover_leaves_a_reused_pid_alone(tmp_path, change):
    port = free_port()
    dep = dep_file(tmp_path, port)
    with process([sys.executable, "-c", "import time; time.sleep(120)"]) as other:
        live = ProcessRecord.of(other.pid)
        journalled = (ProcessRecord(live.pid, live.create_time - 30, live.cmdline) if change == "create_time"
                      else ProcessRecord(live.pid, live.create_time, (*FAKE, "--port", str(port))))
        j = pending_journal(tmp_path, dep, journalled)
        r = cli(tmp_path, "recover", "--deployment", str(dep))
        assert r.code == 0, r.stderr
        assert f"left pid {other.pid} alone" in r.stdout and "nothing started" in r.stdout, r.stdout
        time.sleep(0.3)
        assert other.poll() is None and ProcessRecord.of(other.pid) == live
        assert j.pending() is None


def test_a_clock_step_does_not_make_a_live_process_a_stranger(monkeypatch):
    """psutil's create time is boot time (recomputed by the kernel from the wall clock) plus ticks
    since boot: a one-second step of the clock moves it. The recorded process is still ours, and
    the step survives the journal's round trip; a start that differs since boot still does not match."""
    import psutil
    with process([sys.executable, "-c", "import time; time.sleep(120)"]) as ours:
        live = ProcessRecord.of(ours.pid)
        real = psutil._psplatform.boot_time
        monkeypatch.setattr(psutil._psplatform, "boot_time", lambda: real() + 1.0)
        assert abs(psutil.Process(ours.pid).create_time() - live.create_time) >= 0.99  # the step is seen
        assert ProcessRecord.from_entry(json.loads(json.dumps(live.entry()))).alive()
        assert ProcessRecord(live.pid, live.create_time - 0.5, live.cmdline, live.boot_time).check()[0] is None
        assert not ProcessRecord(live.pid, live.create_time, live.cmdline).alive()  # an older journal: no boot time


def test_recover_stops_a_process_it_journalled_and_can_verify(tmp_path):
    """Its identity matches and it carries the experiment's mark (as every engine an experiment
    starts does): stopped. The same identity without the mark: test_recover_forged_journal.py."""
    from advisor.experiments.arms.ownership import Ownership

    port = free_port()
    dep = dep_file(tmp_path, port)
    mark = Ownership(journal_of(tmp_path, dep).path.parent).env("exp-x")
    ours = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env={**os.environ, **mark},
                            start_new_session=True)
    try:
        while not (ProcessRecord.of(ours.pid) or ProcessRecord(0, 0, ())).cmdline:
            time.sleep(0.01)
        pending_journal(tmp_path, dep, ProcessRecord.of(ours.pid))
        r = cli(tmp_path, "recover", "--deployment", str(dep))
        assert r.code == 0 and f"candidate stopped (pid {ours.pid})" in r.stdout, r.stdout + r.stderr
        assert ours.wait(5) is not None
    finally:
        if ours.poll() is None:
            ours.kill()
            ours.wait()


@pytest.mark.parametrize("server", ["http.server", "fake_openai"])
def test_recover_never_stops_what_listens_on_the_port(tmp_path, server):
    """The journal says the advisor stopped the baseline it found; now someone else's server holds
    the port. Not answering /health: the baseline cannot be restarted (exit 2, still pending);
    answering: the baseline is healthy. Either way that server is not touched."""
    port = free_port()
    dep = dep_file(tmp_path, port, owns_process=True)
    with (http_server(port) if server == "http.server" else fake(port)) as other:
        gone = ProcessRecord(999_999, 1.0, ("engine",))
        j = pending_journal(tmp_path, dep, gone, found_serving=True, found=gone.entry())
        j.write("exp-x", "stopping", arm="baseline", who="found", **gone.entry())
        r = cli(tmp_path, "recover", "--deployment", str(dep))
        if server == "fake_openai":
            assert r.code == 0 and f"baseline healthy (served by pid {other.pid}" in unwrapped(r.stdout), r.stdout
            untouched(other, port)
            return
        assert_one_line_error(r, 2, contains=f"port {port} is held by pid {other.pid}")
        assert "cannot be restored" in unwrapped(r.stderr)
        untouched(other, port)
        assert j.pending() is not None, "still pending: the next start retries"
        # An experiment on that target is refused the same way, and still touches nothing.
        r = cli(tmp_path, "experiment", "--deployment", str(dep), *QUICK)
        assert_one_line_error(r, 2, contains=f"port {port} is held by pid {other.pid}")
        untouched(other, port)


def test_recover_does_not_start_a_baseline_that_failed_its_first_start(tmp_path):
    """The advisor dies while its first start of the baseline hangs: `recover` stops that start (the
    journal records it) and starts nothing, since nothing was serving when the experiment began."""
    port = free_port()
    dep = dep_file(tmp_path, port, command=[sys.executable, "-c", "import time; time.sleep(120)"],
                   start_timeout_s=120)
    env = {**os.environ, "ADVISOR_DATA_DIR": str(tmp_path / "data")}
    advisor = subprocess.Popen([sys.executable, "-m", "advisor.cli", "experiment", "--deployment", str(dep), *QUICK],
                               cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    j = journal_of(tmp_path, dep)
    try:
        deadline = time.monotonic() + 60
        while not any(e["event"] == "starting" for e in j.entries()) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        advisor.kill()  # SIGKILL: no restore
        advisor.wait()
    events = j.entries()
    assert [e["event"] for e in events][:2] == ["begin", "starting"], "begin is journalled before the first start"
    assert events[0]["found_serving"] is False
    engine = ProcessRecord.from_entry(events[1])
    assert engine.alive()
    r = cli(tmp_path, "recover", "--deployment", str(dep))
    assert r.code == 0, r.stderr
    assert f"baseline stopped (pid {engine.pid})" in r.stdout and "nothing started" in r.stdout, r.stdout
    assert not engine.alive() and listener(port) is None
    assert j.pending() is None


def test_a_baseline_that_exits_at_its_first_start_is_one_line_and_left_stopped(tmp_path):
    port = free_port()
    dep = dep_file(tmp_path, port, args=["--tokens", "not-a-number"])
    r = cli(tmp_path, "experiment", "--deployment", str(dep), *QUICK)
    assert_one_line_error(r, 2, contains="exited with code")
    assert listener(port) is None
    r = cli(tmp_path, "recover", "--deployment", str(dep))
    assert r.code == 0 and "nothing to recover" in r.stdout
    assert listener(port) is None


# -- a second Ctrl-C while the baseline is restored ----------------------------------------------------

def test_a_second_interrupt_waits_for_the_restore(tmp_path, ports):
    port = free_port()
    ports.append(port)
    dep = dep_file(tmp_path, port, owns_process=True)
    with fake(port, "--max-num-seqs", "2") as found:
        env = {**os.environ, "ADVISOR_DATA_DIR": str(tmp_path / "data")}
        advisor = subprocess.Popen(
            [sys.executable, "-m", "advisor.cli", "experiment", "--deployment", str(dep), "--mechanism",
             "max_num_seqs", "--value", "8", "--blocks", "6", "--block-requests", "48", "--no-save",
             "--readout", "ttft_p50"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines: list[str] = []
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # the candidate has replaced the found baseline
                try:
                    if argv_at(port) == ["--max-num-seqs", "8"]:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
            else:
                pytest.fail("the candidate never served")
            advisor.send_signal(signal.SIGINT)
            for line in advisor.stderr:
                lines.append(line)
                if "restoring the baseline" in line:
                    advisor.send_signal(signal.SIGINT)
                    break
            out, err = advisor.communicate(timeout=60)
        finally:
            if advisor.poll() is None:
                advisor.kill()
        err = "".join(lines) + err
        assert found.poll() is not None
    assert "SIGINT received: finishing the restore first, then stopping" in err, err
    assert "Traceback" not in err
    assert advisor.returncode == 1, err
    assert healthy(f"http://127.0.0.1:{port}") and argv_at(port) == ["--max-num-seqs", "2"]
    events = [e["event"] for e in journal_of(tmp_path, dep).entries()]
    assert "restored" in events and journal_of(tmp_path, dep).pending() is None
