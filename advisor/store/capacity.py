"""The store's capacity runs: each answer of `advisor capacity` kept whole, and listed by deployment
so that a page or a report can set this week's capacity beside last week's.

The result is kept as the document its model wrote (a CapacityResult, advisor/capacity/result.py, a
layer above the store) and given back as that document, for the layer that knows its type to read.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol

from sqlalchemy import select

from advisor.store.documents import document, equal, finite
from advisor.store.errors import StoreError
from advisor.store.tables import CapacityRunRow
from probes.http import redact_url


@dataclass(frozen=True)
class CapacitySummary:
    """One line of a capacity history; the whole answer comes from Store.get_capacity(id)."""

    id: int
    created_at: datetime
    deployment: str | None
    target: str
    model: str
    workload: str
    status: str
    estimate: float | None
    low: float | None
    high: float | None
    level: float
    binding: str | None
    requests: int
    seconds: float


class CapacityAnswer(Protocol):
    """What the store lists a capacity run by, beside its whole document."""

    target: str
    model: str
    workload: str
    status: str
    estimate: float | None
    low: float | None
    high: float | None
    level: float
    binding: str | None
    requests: int
    seconds: float

    def model_dump_json(self) -> str: ...


_COLUMNS = [getattr(CapacityRunRow, f) for f in CapacitySummary.__dataclass_fields__]


class CapacityMixin:
    """Store methods for capacity runs (see repository.Store for _guard, _sessions and _newest)."""

    def save_capacity(self, result: CapacityAnswer, deployment: str | None = None,
                      created_at: datetime | None = None) -> int:
        row = CapacityRunRow(created_at=created_at or datetime.now(timezone.utc), deployment=deployment,
                             target=redact_url(result.target), model=result.model, workload=result.workload,
                             status=result.status, estimate=finite(result.estimate), low=finite(result.low),
                             high=finite(result.high), level=result.level, binding=result.binding,
                             requests=result.requests, seconds=result.seconds, result=document(result))
        with self._guard("save the capacity run"), self._sessions.begin() as session:
            session.add(row)
            session.flush()
            return row.id

    def list_capacity(self, deployment: str | None = None, since: datetime | None = None,
                      until: datetime | None = None, limit: int = 50) -> list[CapacitySummary]:
        """Newest first, optionally of one deployment, created in [since, until)."""
        where = equal(CapacityRunRow, deployment=deployment)
        if since is not None:
            where.append(CapacityRunRow.created_at >= since)
        if until is not None:
            where.append(CapacityRunRow.created_at < until)
        return self._newest("capacity runs", CapacitySummary, _COLUMNS, CapacityRunRow, limit, where)

    def get_capacity(self, run_id: int) -> tuple[CapacitySummary, dict[str, Any]]:
        """A capacity run's summary and its whole document."""
        with self._guard(f"read capacity run {run_id}"), self._sessions() as session:
            found = session.execute(select(*_COLUMNS, CapacityRunRow.result).where(CapacityRunRow.id == run_id)).first()
        if found is None:
            raise StoreError(f"no capacity run {run_id} in the store at {self.url}")
        *summary, doc = found
        return CapacitySummary(*summary), doc
