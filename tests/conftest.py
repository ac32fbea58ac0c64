"""Shared fixtures that start real services. Nothing starts unless a test asks for it."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pytest

from advisor.localstack import LocalEngine, LocalPrometheus


@pytest.fixture(scope="session")
def local_engine() -> Iterator[LocalEngine]:
    """The real CPU vLLM with the tiny model, admitting only 2 sequences so that load queues.

    Started once per session (~30-60 s on 2 cores); tests must leave it idle when they finish.
    """
    with LocalEngine(max_num_seqs=2) as engine:
        yield engine


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
