"""A baseline found serving with users of its own is not measured as the baseline arm by default:
a fresh replica, started like the candidate, stands in for it where the host has room, and where it
has none the experiment is refused before anything starts, with the choices. Fake engines on
loopback (real processes); the busy engine's /metrics are real vLLM captures."""

from __future__ import annotations

import sys

import pytest

from advisor.experiments.arms import engine_readouts
from advisor.experiments.arms import room
from advisor.experiments.design.deployment import Deployment
from advisor.experiments.arms.journal import Journal
from advisor.experiments.arms.protocol import LaunchError
from advisor.experiments.arms.local import LocalLauncher
from tests.support.servers import ROOT, free_port, listener
from tests.unit.test_engine_readouts import transport
from tests.unit.test_process_ownership import fake

BUSY = "34 requests finished, 2.0 running in 3 s before the first block"


@pytest.fixture(autouse=True)
def _cwd(monkeypatch):
    monkeypatch.chdir(ROOT)


def host(monkeypatch, cores: int) -> None:
    monkeypatch.setattr(room.Host, "this", classmethod(lambda cls: cls(cores=cores, available_bytes=20 * 2**30)))


def spec(port: int) -> Deployment:
    return Deployment.model_validate({
        "name": "fake", "engine": "llamacpp", "model": "fake", "launcher": "local",
        "local": {"command": [sys.executable, "-m", "tests.support.fake_openai"], "args": ["-t", "1"],
                  "port": port, "candidate_port": free_port(), "arms": "parallel", "start_timeout_s": 20}})


def launcher(tmp_path, dep: Deployment, baseline: str = "auto") -> LocalLauncher:
    return LocalLauncher(dep, ["-t", "1", "--tokens", "9"], {}, Journal(tmp_path / "state"), "e1", tmp_path / "logs",
                         baseline=baseline)


def test_outside_traffic_is_read_off_the_found_engines_own_metrics():
    busy = engine_readouts.outside_traffic("http://engine.test", "vllm", "tiny-llama", seconds=0.05,
                                           transport=transport(["metrics-queueing-t0", "metrics-queueing-t1"]))
    assert busy and "34 requests finished" in busy
    idle = engine_readouts.outside_traffic("http://engine.test", "vllm", "tiny-llama", seconds=0.05,
                                           transport=transport(["metrics-idle-after-load", "metrics-idle-after-load"]))
    assert idle is None


def test_a_busy_found_engine_gets_a_fresh_baseline_replica_where_there_is_room(tmp_path, monkeypatch):
    host(monkeypatch, 8)
    monkeypatch.setattr(engine_readouts, "outside_traffic", lambda *a, **k: BUSY)
    port = free_port()
    dep = spec(port)
    with fake(port) as found:
        lau = launcher(tmp_path, dep)
        lau.preflight()
        assert lau.replica and lau.baseline_port not in (port, dep.local.candidate_port)
        assert any("the baseline arm is a fresh replica" in n and "outside traffic" in n for n in lau.notes), lau.notes
        assert lau.found_state()["baseline_replica"] == lau.baseline_port
        try:
            assert lau.bring_up("baseline") == f"http://127.0.0.1:{lau.baseline_port}"
            assert listener(lau.baseline_port) not in (None, found.pid)
            lau.bring_up("candidate")
        finally:
            note = lau.restore()
        assert "fresh replicas" in note and "not touched" in note
        assert listener(lau.baseline_port) is None and listener(port) == found.pid


def test_without_room_it_is_refused_before_anything_starts_with_the_choices(tmp_path, monkeypatch):
    host(monkeypatch, 2)  # the found engine, a fresh baseline and the candidate: 3 cores of 1 thread
    monkeypatch.setattr(engine_readouts, "outside_traffic", lambda *a, **k: BUSY)
    port = free_port()
    dep = spec(port)
    with fake(port) as found:
        lau = launcher(tmp_path, dep)
        with pytest.raises(LaunchError) as e:
            lau.preflight()
        msg = str(e.value)
        assert "carries outside traffic (34 requests finished" in msg and "need 3 cores; this host has 2" in msg
        assert "--baseline found" in msg
        assert not lau.started and listener(port) == found.pid


def test_an_idle_found_engine_stays_the_baseline_and_found_is_never_replaced(tmp_path, monkeypatch):
    host(monkeypatch, 8)
    port = free_port()
    with fake(port):
        idle = launcher(tmp_path, spec(port))
        monkeypatch.setattr(engine_readouts, "outside_traffic", lambda *a, **k: None)
        idle.preflight()
        assert not idle.replica
        monkeypatch.setattr(engine_readouts, "outside_traffic", lambda *a, **k: BUSY)
        found = launcher(tmp_path, spec(port), baseline="found")
        found.preflight()
        assert not found.replica


def test_fresh_is_a_choice_and_needs_parallel_arms(tmp_path, monkeypatch):
    host(monkeypatch, 8)
    monkeypatch.setattr(engine_readouts, "outside_traffic", lambda *a, **k: pytest.fail("not asked when fresh"))
    port = free_port()
    with fake(port):
        lau = launcher(tmp_path, spec(port), baseline="fresh")
        lau.preflight()
        assert lau.replica and any("asked for (--baseline fresh)" in n for n in lau.notes)
    seq = Deployment.model_validate({**spec(port).model_dump(mode="json", exclude_none=True),
                                     "local": {**spec(port).local.model_dump(mode="json", exclude_none=True),
                                               "arms": "sequential", "candidate_port": None}})
    with pytest.raises(LaunchError, match="--baseline fresh needs arms: parallel"):
        launcher(tmp_path, seq, baseline="fresh").preflight()


def test_sequential_arms_listen_for_outside_traffic_and_say_the_candidate_will_serve_it(tmp_path, monkeypatch):
    """With arms: sequential (and owns_process, which sequential needs for a process found serving)
    no replica can stand beside the candidate: the users' traffic is listened for and said before
    the first block, never silently measured; an idle engine gets no note."""
    port = free_port()
    dep = Deployment.model_validate({**spec(port).model_dump(), "local": {
        **spec(port).local.model_dump(), "arms": "sequential", "candidate_port": None, "owns_process": True}})
    with fake(port):
        monkeypatch.setattr(engine_readouts, "outside_traffic", lambda *a, **k: BUSY)
        busy = launcher(tmp_path, dep)
        busy.preflight()
        assert not busy.replica
        [note] = [n for n in busy.notes if "outside traffic" in n]
        assert BUSY in note and "the candidate included" in note and f"port {port}" in note
        monkeypatch.setattr(engine_readouts, "outside_traffic", lambda *a, **k: None)
        idle = launcher(tmp_path, dep)
        idle.preflight()
        assert not [n for n in idle.notes if "outside traffic" in n]


@pytest.mark.parametrize("choice, says", [
    ("auto", "unless it carries outside traffic when the experiment starts"),
    ("fresh", "a fresh replica on a free port, started like the candidate (--baseline fresh)"),
    ("found", "as found, its outside traffic counted and reported per block (--baseline found)")])
def test_the_plan_says_which_process_serves_the_baseline_arm(choice, says):
    from advisor.experiments.run.setup import design

    d = design(spec(free_port()), None, None, None, aa=True, baseline=choice)
    [line] = [x for x in d.describe() if x.startswith("baseline arm:")]
    assert says in line, line
