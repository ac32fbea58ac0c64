"""Shared fixtures that start real services. Nothing starts unless a test asks for it."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from advisor.localstack import LocalEngine, LocalPrometheus


def _serving(engine: LocalEngine) -> bool:
    import httpx

    if engine.proc is None or engine.proc.poll() is not None:
        return False
    try:
        return httpx.get(f"{engine.url}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


class Engines:
    """Real CPU vLLM engines shared by the tests of a session, one per distinct configuration.

    engines(max_num_seqs=4, extra_args=["--no-enable-prefix-caching"]) hands every test that asks
    for the same flags (and model) the same running engine, started on first use (~30 s on 2
    cores); a test that asks for another configuration starts another. At most `keep` engines stay
    up between tests: the one used longest ago is stopped first (each holds ~3 GiB).

    A test gets an engine as it was found and must leave it so: its own process, healthy, serving
    with the flags it was started with; the `engines` fixture fails the test that did not (and the
    next one gets a fresh engine). A test that stops, replaces or reconfigures the engine it was
    given starts its own `LocalEngine` instead."""

    def __init__(self, keep: int = 3) -> None:
        self.keep = keep
        self.live: OrderedDict[tuple, LocalEngine] = OrderedDict()
        self.started: list[tuple] = []  # every start, in order

    @staticmethod
    def key(max_num_seqs: int | None, extra_args: Sequence[str], model: Path | str | None,
            served_model_name: str | None) -> tuple:
        return (max_num_seqs, tuple(extra_args), str(model) if model else None, served_model_name)

    def get(self, key: tuple, in_use: Sequence[tuple] = ()) -> LocalEngine:
        engine = self.live.get(key)
        if engine is None:
            while len(self.live) >= self.keep:  # room, never at the cost of one this test holds
                victim = next((k for k in self.live if k not in in_use), None)
                if victim is None:
                    break
                self.live.pop(victim).stop()
            max_num_seqs, extra_args, model, name = key
            kw = {"served_model_name": name} if name else {}
            engine = LocalEngine(max_num_seqs=max_num_seqs, extra_args=list(extra_args), model=model, **kw)
            engine.__enter__()
            self.live[key] = engine
            self.started.append(key)
        self.live.move_to_end(key)
        return engine

    def drop(self, key: tuple) -> None:
        engine = self.live.pop(key, None)
        if engine is not None:
            engine.stop()

    def close(self) -> None:
        while self.live:
            self.live.popitem()[1].stop()


@pytest.fixture(scope="session")
def _engine_pool() -> Iterator[Engines]:
    pool = Engines()
    yield pool
    pool.close()


@pytest.fixture
def engines(_engine_pool) -> Iterator[Callable[..., LocalEngine]]:
    """A factory of shared real engines keyed by their flags (see Engines):
    engines(max_num_seqs=2, extra_args=(), model=None, served_model_name=None) -> a healthy LocalEngine.

    When the test ends, every engine it was handed must still be the process that was started,
    healthy: else the test fails here, and the engine is replaced for the next one."""
    held: dict[tuple, tuple[LocalEngine, int]] = {}

    def get(max_num_seqs: int | None = 2, extra_args: Sequence[str] = (), model: Path | str | None = None,
            served_model_name: str | None = None) -> LocalEngine:
        key = Engines.key(max_num_seqs, extra_args, model, served_model_name)
        engine = _engine_pool.get(key, in_use=list(held))
        held.setdefault(key, (engine, engine.proc.pid))
        return engine

    yield get
    broken = []
    for key, (engine, pid) in held.items():
        if _engine_pool.live.get(key) is not engine or engine.proc is None or engine.proc.pid != pid \
                or not _serving(engine):
            broken.append(f"{engine.command()[-6:]} on port {engine.port}")
            _engine_pool.drop(key)
    assert not broken, f"the test left a shared engine stopped or unhealthy: {broken}"


@pytest.fixture
def local_engine(engines) -> LocalEngine:
    """The real CPU vLLM with the tiny model, admitting only 2 sequences so that load queues.

    Shared by the session (engines(max_num_seqs=2)); tests must leave it idle when they finish.
    """
    return engines(max_num_seqs=2)


@pytest.fixture
def local_prometheus() -> Iterator[Callable[..., LocalPrometheus]]:
    """A factory: local_prometheus(["127.0.0.1:port", ...], **kw) -> a started LocalPrometheus.

    Every server it started is stopped when the test ends.
    """
    started: list[LocalPrometheus] = []

    def start(targets: Sequence[str], **kwargs) -> LocalPrometheus:
        prom = LocalPrometheus(list(targets), **kwargs)
        started.append(prom)
        return prom.start()

    yield start
    for prom in started:
        prom.stop()


@pytest.fixture
def isolated_store(tmp_path, monkeypatch):
    """The advisor's data folder (journals, locks, calibrations) and store under tmp_path."""
    monkeypatch.setenv("ADVISOR_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("ADVISOR_DB_URL", f"sqlite:///{tmp_path / 'advisor.db'}")
    from advisor.settings import get_settings

    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()
