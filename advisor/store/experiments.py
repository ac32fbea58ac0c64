"""The store's experiments: a row written when one starts, completed when it ends, read back whole.

The result is kept as the document its model wrote (an ExperimentResult, advisor/experiments/result.py,
a layer above the store) and given back as that document, for the layer that knows its type to read.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol

from sqlalchemy import select, update

from advisor.store.documents import document, equal, finite, plain
from advisor.store.errors import StoreError
from advisor.store.tables import ExperimentRow
from probes.http import redact_url


@dataclass(frozen=True)
class ExperimentSummary:
    """One line of an experiments listing; the documents come from Store.get_experiment(id)."""

    id: int
    key: str
    created_at: datetime
    updated_at: datetime
    deployment: str
    target: str
    mechanism: str
    value: str
    status: str
    verdict: str | None
    primary_metric: str | None
    ratio: float | None
    baseline_restored: bool | None
    diagnosis_id: int | None


@dataclass(frozen=True)
class StoredExperiment:
    summary: ExperimentSummary
    design: dict[str, Any]
    journal: str | None
    # The result's document; None while it runs, if it failed, or if it died without a word.
    result_document: dict[str, Any] | None


class FinishedExperiment(Protocol):
    """What the store lists an ended experiment by, beside its whole document."""

    @property
    def status(self) -> str: ...
    @property
    def verdict(self) -> str: ...
    @property
    def primary_metric(self) -> str: ...
    @property
    def ratio(self) -> float | None: ...
    @property
    def baseline_restored(self) -> bool | None: ...
    def model_dump_json(self) -> str: ...


_COLUMNS = [getattr(ExperimentRow, f) for f in ExperimentSummary.__dataclass_fields__]


class ExperimentsMixin:
    """Store methods for experiments (see repository.Store for _guard and _sessions)."""

    def start_experiment(self, key: str, deployment: str, target: str, mechanism: str, value: str,
                         design: dict[str, Any], journal: str | None = None,
                         diagnosis_id: int | None = None, launch_key: str | None = None) -> int:
        """A running experiment's row, before its first block: returns the id its blocks carry."""
        now = datetime.now(timezone.utc)
        with self._guard("record the experiment"), self._sessions.begin() as session:
            row = ExperimentRow(key=key, created_at=now, updated_at=now, deployment=deployment,
                                target=redact_url(target), mechanism=mechanism, value=value, status="running",
                                journal=journal, design=plain(design), diagnosis_id=diagnosis_id,
                                launch_key=launch_key)
            session.add(row)
            session.flush()
            return row.id

    def touch_experiment(self, experiment_id: int) -> None:
        """A running experiment's heartbeat (after each block): a row that stops beating is stale."""
        with self._guard(f"update experiment {experiment_id}"), self._sessions.begin() as session:
            session.execute(update(ExperimentRow).where(ExperimentRow.id == experiment_id)
                            .values(updated_at=datetime.now(timezone.utc)))

    def find_experiment_by_launch(self, deployment: str, launch_key: str) -> int | None:
        query = select(ExperimentRow.id).where(ExperimentRow.deployment == deployment,
                                               ExperimentRow.launch_key == launch_key)
        with self._guard("find the experiment"), self._sessions() as session:
            return session.execute(query).scalar()

    def finish_experiment(self, experiment_id: int, result: FinishedExperiment, status: str | None = None) -> None:
        """The experiment's end: its whole result, and its status (the result's, or `status`:
        interrupted, failed)."""
        values = dict(updated_at=datetime.now(timezone.utc), status=status or result.status,
                      verdict=result.verdict, primary_metric=result.primary_metric, ratio=finite(result.ratio),
                      baseline_restored=result.baseline_restored, result=document(result))
        with self._guard(f"complete experiment {experiment_id}"), self._sessions.begin() as session:
            session.execute(update(ExperimentRow).where(ExperimentRow.id == experiment_id).values(**values))

    def fail_experiment(self, experiment_id: int, why: str) -> None:
        """An experiment that ended without a result (it could not start, or crashed)."""
        with self._guard(f"complete experiment {experiment_id}"), self._sessions.begin() as session:
            session.execute(update(ExperimentRow).where(ExperimentRow.id == experiment_id).values(
                updated_at=datetime.now(timezone.utc), status="failed", verdict=None,
                result={"failed": why[:2000]}))

    def link_experiments(self, diagnosis_id: int, deployment: str, keys: list[str]) -> int:
        """Marks the deployment's experiments with these keys as run for this diagnosis; returns how many."""
        if not keys:
            return 0
        with self._guard(f"link experiments to diagnosis {diagnosis_id}"), self._sessions.begin() as session:
            done = session.execute(update(ExperimentRow).where(ExperimentRow.key.in_(keys), ExperimentRow.deployment == deployment)
                                   .values(diagnosis_id=diagnosis_id))
            return done.rowcount or 0

    def list_experiments(self, deployment: str | None = None, diagnosis_id: int | None = None,
                         limit: int = 50) -> list[ExperimentSummary]:
        """Newest first, optionally of one deployment or one diagnosis."""
        return self._newest("experiments", ExperimentSummary, _COLUMNS, ExperimentRow, limit,
                            equal(ExperimentRow, deployment=deployment, diagnosis_id=diagnosis_id))

    def get_experiment(self, experiment_id: int) -> StoredExperiment:
        query = select(*_COLUMNS, ExperimentRow.design, ExperimentRow.journal, ExperimentRow.result).where(
            ExperimentRow.id == experiment_id)
        with self._guard(f"read experiment {experiment_id}"), self._sessions() as session:
            found = session.execute(query).first()
        if found is None:
            raise StoreError(f"no experiment {experiment_id} in the store at {self.url}")
        *summary, design, journal, result = found
        # fail_experiment's marker is the store's own: an experiment that ended without a result
        ended = result if result is not None and "failed" not in result else None
        return StoredExperiment(ExperimentSummary(*summary), design, journal, ended)
