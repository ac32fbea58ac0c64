from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent.parent / "fixtures" / "vllm-0.32.0-cpu"


@pytest.fixture
def capture():
    """Text of a real vLLM 0.32.0 CPU /metrics capture, by file stem."""
    return lambda stem: (FIXTURES / f"{stem}.txt").read_text()


@pytest.fixture
def at_root(monkeypatch):
    """Run from the project's root: fake engines start as `python -m tests.support...`."""
    from tests.support.servers import ROOT

    monkeypatch.chdir(ROOT)


@pytest.fixture
def ports():
    """Ports a test had engines listen on; whatever still listens there afterwards is stopped."""
    from advisor.children import stop_pid
    from tests.support.servers import listener

    used: list[int] = []
    yield used
    for p in used:
        if listener(p):
            stop_pid(listener(p))


@pytest.fixture(autouse=True)
def _short_outside_traffic_listen(monkeypatch):
    """The fake engines of these tests have no users: the 3 s a real baseline found serving is
    listened to for outside traffic only made each in-process experiment 3 s longer. The tests of
    that listening pass their own `seconds` or replace it."""
    from advisor.experiments.arms import engine_readouts

    monkeypatch.setattr(engine_readouts, "LISTEN_S", 0.3)
