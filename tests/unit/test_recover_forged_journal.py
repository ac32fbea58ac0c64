"""`advisor recover` trusts no journal line on its own: a process is stopped only when it carries the
mark of the experiment being recovered (an HMAC under a key beside the journal, in the environment
the advisor gave it), and a line the advisor cannot have written is reported and left out, never an
error that locks the target. Real processes started by these tests stand for what a forger names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import psutil
import pytest

from advisor import children
from advisor.experiments.arms.ownership import MARK_VARIABLE, Ownership
from advisor.experiments.arms.processes import ProcessRecord
from advisor.experiments.arms.recovery import recover
from advisor.experiments.design.deployment import load_deployment
from tests.support.servers import ROOT, free_port
from tests.unit.test_process_ownership import cli, dep_file, journal_of, unwrapped

SLEEP = [sys.executable, "-c", "import time; time.sleep(120)"]


def started(argv: list[str], env: dict[str, str] | None = None, session: bool = True) -> subprocess.Popen:
    return subprocess.Popen(argv, cwd=ROOT, env={**os.environ, **(env or {})}, start_new_session=session,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def ended(*procs: subprocess.Popen) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(5)


def identity(proc: subprocess.Popen) -> ProcessRecord:
    for _ in range(100):
        rec = ProcessRecord.of(proc.pid)
        if rec and rec.cmdline:
            return rec
        time.sleep(0.01)
    raise AssertionError("no identity")


def forged(tmp_path, dep, *lines: dict | str) -> None:
    j = journal_of(tmp_path, dep)
    j.write("exp-x", "begin", found_serving=False)
    with open(j.path, "a") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")


def test_a_forged_entry_naming_a_live_process_and_its_group_leaves_both_running(tmp_path):
    """The user's own process, leading a group with a second process in it, named in the journal with
    its real pid, create time and command line (and a claim that the advisor made its session)."""
    dep = dep_file(tmp_path, free_port())
    leader = started([sys.executable, "-c", "import subprocess, sys, time; "
                      "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); time.sleep(120)"])
    try:
        rec = identity(leader)
        deadline = time.monotonic() + 10
        while not psutil.Process(leader.pid).children() and time.monotonic() < deadline:
            time.sleep(0.05)
        member = psutil.Process(leader.pid).children()[0]
        assert os.getpgid(member.pid) == leader.pid
        Ownership(journal_of(tmp_path, dep).path.parent).mark("exp-earlier")  # the key exists: real experiments ran
        forged(tmp_path, dep, {"t": 1, "experiment": "exp-x", "event": "starting", "arm": "candidate",
                               **rec.entry(), "session": True})
        r = cli(tmp_path, "recover", "--deployment", str(dep))
        assert r.code == 0, r.stderr
        out = unwrapped(r.stdout)
        assert f"left pid {leader.pid} alone: it does not carry the advisor's mark" in out, out
        time.sleep(0.5)
        assert leader.poll() is None and member.is_running() and member.status() != psutil.STATUS_ZOMBIE
        assert journal_of(tmp_path, dep).pending() is None, "recovered: the target is not left locked"
    finally:
        for p in psutil.Process(leader.pid).children(recursive=True) if leader.poll() is None else []:
            p.kill()
        ended(leader)


def test_pid_1_named_with_its_real_identity_is_never_signalled(tmp_path, monkeypatch):
    path = dep_file(tmp_path, free_port())
    dep = load_deployment(path)
    init = ProcessRecord.of(1)
    if init is None:
        pytest.skip("PID 1 cannot be read in this container")
    signalled = []
    monkeypatch.setattr(children, "stop", lambda proc, *a, **k: signalled.append(proc.pid))
    monkeypatch.setattr(os, "killpg", lambda *a: signalled.append(a))
    j = journal_of(tmp_path, path)
    j.write("exp-x", "begin", found_serving=False)
    j.write("exp-x", "starting", arm="candidate", **{**init.entry(), "session": True})
    note = recover(dep, j, tmp_path / "logs")
    assert "left pid 1 alone" in note and not signalled


@pytest.mark.parametrize("line", [
    {"t": 1, "experiment": "exp-x", "event": "starting", "arm": "candidate", "pid": -1, "create_time": 1.0,
     "cmdline": ["x"]},
    {"t": 1, "experiment": "exp-x", "event": "starting", "arm": "candidate", "pid": True, "create_time": 1.0,
     "cmdline": ["x"]},
    {"t": 1, "experiment": "exp-x", "event": "starting", "pid": "123", "create_time": "now", "cmdline": "x"},
    {"t": 1, "experiment": "exp-x", "event": "starting", "arm": ["x"], "pid": 2**40},
    ["not", "an", "object"],
    {"experiment": 7, "event": "starting"},
    "{not json at all",
    '"a string"',
], ids=["pid -1", "pid true", "wrong types", "huge pid", "a list", "experiment not a string", "not json",
        "a json string"])
def test_a_malformed_line_is_one_clear_line_and_never_locks_the_target(tmp_path, line):
    port = free_port()
    dep = dep_file(tmp_path, port)
    forged(tmp_path, dep, line, {"t": 2, "experiment": "exp-x", "event": "note"})
    r = cli(tmp_path, "recover", "--deployment", str(dep))
    assert r.code == 0, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr and "internal error" not in (r.stdout + r.stderr).lower()
    assert journal_of(tmp_path, dep).pending() is None
    again = cli(tmp_path, "recover", "--deployment", str(dep))
    assert again.code == 0 and "nothing to recover" in again.stdout, again.stdout + again.stderr


def test_a_line_that_is_no_entry_is_reported(tmp_path):
    dep = dep_file(tmp_path, free_port())
    forged(tmp_path, dep, ["x"], "{torn", {"t": 2, "experiment": "exp-x", "event": "note"})
    r = cli(tmp_path, "recover", "--deployment", str(dep))
    out = unwrapped(r.stdout + r.stderr)
    assert r.code == 0, out
    assert "line 2 is not an entry the advisor writes" in out and "line 3 is not JSON" in out, out


def test_a_process_carrying_the_experiments_mark_is_stopped_and_another_experiments_mark_is_not(tmp_path):
    dep = dep_file(tmp_path, free_port())
    j = journal_of(tmp_path, dep)
    own = Ownership(j.path.parent)
    ours = started(SLEEP, own.env("exp-x"))
    other = started(SLEEP, own.env("exp-older"))
    try:
        j.write("exp-x", "begin", found_serving=False)
        for p in (ours, other):
            j.write("exp-x", "starting", arm="candidate", **{**identity(p).entry(), "session": True})
        r = cli(tmp_path, "recover", "--deployment", str(dep))
        out = unwrapped(r.stdout)
        assert r.code == 0, r.stderr
        assert f"candidate stopped (pid {ours.pid})" in out, out
        assert f"left pid {other.pid} alone: it carries the mark of another experiment" in out, out
        assert ours.wait(5) is not None and other.poll() is None
    finally:
        ended(ours, other)


def test_the_mark_is_in_no_journal_and_its_key_is_private(tmp_path):
    dep = dep_file(tmp_path, free_port())
    j = journal_of(tmp_path, dep)
    own = Ownership(j.path.parent)
    mark = own.mark("exp-x")
    j.write("exp-x", "begin")
    assert mark not in j.path.read_text()
    assert (own.path.stat().st_mode & 0o777) == 0o600 and (j.path.stat().st_mode & 0o777) == 0o600
    assert own.mark("exp-x") == mark and own.mark("exp-y") != mark
    assert MARK_VARIABLE.startswith("ADVISOR_")


@pytest.mark.parametrize("what", ["fifo", "huge", "directory"])
def test_a_journal_that_is_no_file_or_too_large_is_one_line_never_a_hang(tmp_path, what):
    """A FIFO in the journal's place would block `recover` in open() forever; a journal larger than
    the advisor writes would be read whole. Each is refused in one line that says what to do."""
    dep = dep_file(tmp_path, free_port())
    j = journal_of(tmp_path, dep)
    j.path.parent.mkdir(parents=True, exist_ok=True)
    if what == "fifo":
        os.mkfifo(j.path)
    elif what == "directory":
        j.path.mkdir()
    else:
        j.write("exp-x", "begin")
        with open(j.path, "ab") as f:
            f.truncate(65 << 20)  # sparse: larger than the ceiling without writing it
    r = cli(tmp_path, "recover", "--deployment", str(dep), timeout=30)
    out = unwrapped(r.stdout + r.stderr)
    assert r.code != 0 and "Traceback" not in out and "internal error" not in out.lower(), out
    assert str(j.path.name) in out and "move it aside" in out, out
    assert len([x for x in r.stderr.splitlines() if x.strip()]) <= 3, r.stderr


def test_an_owner_key_that_is_no_key_proves_no_process(tmp_path):
    """An owner.key the advisor did not write (the wrong length, or a FIFO) proves nothing: the
    process named is left running, and recovery still ends."""
    dep = dep_file(tmp_path, free_port())
    j = journal_of(tmp_path, dep)
    own = Ownership(j.path.parent)
    user = started(SLEEP, own.env("exp-x"))
    try:
        j.write("exp-x", "begin", found_serving=False)
        j.write("exp-x", "starting", arm="candidate", **{**identity(user).entry(), "session": True})
        own.path.write_bytes(b"short")
        assert "not a key the advisor wrote" in own.verify(user.pid, "exp-x")
        own.path.unlink()
        os.mkfifo(own.path)
        r = cli(tmp_path, "recover", "--deployment", str(dep), timeout=30)
        assert "Traceback" not in r.stdout + r.stderr, r.stderr
        assert user.poll() is None, unwrapped(r.stdout + r.stderr)
    finally:
        ended(user)


def test_a_marked_process_in_a_group_it_does_not_lead_is_stopped_alone(tmp_path):
    """Only their own group: the journal claims the advisor made the marked process' session, but it
    is a member of the user's group (its leader unmarked). recover stops the marked process and
    signals no group: the leader and its other member keep running."""
    dep = dep_file(tmp_path, free_port())
    j = journal_of(tmp_path, dep)
    own = Ownership(j.path.parent)
    child = "import time; time.sleep(120)"
    leader = started([sys.executable, "-c", "import os, subprocess, sys, time; "
                      f"subprocess.Popen([sys.executable, '-c', {child!r}], env={{**os.environ, **{own.env('exp-x')!r}}}); "
                      f"subprocess.Popen([sys.executable, '-c', {child!r}]); time.sleep(120)"])
    try:
        deadline = time.monotonic() + 10
        while len(psutil.Process(leader.pid).children()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        kids = psutil.Process(leader.pid).children()
        marked = next(k for k in kids if own.verify(k.pid, "exp-x") is None)
        other = next(k for k in kids if k.pid != marked.pid)
        assert os.getpgid(marked.pid) == leader.pid != marked.pid
        rec = None
        for _ in range(100):
            rec = ProcessRecord.of(marked.pid)
            if rec and rec.cmdline:
                break
            time.sleep(0.01)
        j.write("exp-x", "begin", found_serving=False)
        j.write("exp-x", "starting", arm="candidate", **{**rec.entry(), "session": True})
        r = cli(tmp_path, "recover", "--deployment", str(dep))
        assert r.code == 0, r.stderr
        out = unwrapped(r.stdout)
        assert f"candidate stopped (pid {marked.pid})" in out, out
        gone = time.monotonic() + 10  # a zombie until its parent, the user's leader, reaps it
        while marked.is_running() and marked.status() != psutil.STATUS_ZOMBIE and time.monotonic() < gone:
            time.sleep(0.05)
        assert not marked.is_running() or marked.status() == psutil.STATUS_ZOMBIE
        time.sleep(0.3)
        assert leader.poll() is None and other.is_running() and other.status() != psutil.STATUS_ZOMBIE, \
            unwrapped(r.stdout)
    finally:
        for p in psutil.Process(leader.pid).children(recursive=True) if leader.poll() is None else []:
            p.kill()
        ended(leader)
