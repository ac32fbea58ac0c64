"""The store's record of scheduled jobs: one row per (job, slot), which is also the lock that keeps
two advisors on one database from running the same slot twice."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from advisor.store.tables import JobRunRow


@dataclass(frozen=True)
class JobRun:
    id: int
    job: str
    slot: str
    owner: str
    started_at: datetime
    finished_at: datetime | None
    ok: bool | None
    detail: str | None


_COLUMNS = [getattr(JobRunRow, f) for f in JobRun.__dataclass_fields__]
DETAIL_CHARS = 2000


class JobsMixin:
    def claim_job(self, job: str, slot: str, owner: str) -> int | None:
        """The id of a new run of `job` in `slot`, or None when another advisor claimed it first."""
        try:
            with self._sessions.begin() as session:
                row = JobRunRow(job=job, slot=slot, owner=owner, started_at=datetime.now(timezone.utc))
                session.add(row)
                session.flush()
                return row.id
        except IntegrityError:
            return None

    def finish_job(self, run_id: int, ok: bool, detail: str | None = None) -> None:
        with self._guard(f"complete job run {run_id}"), self._sessions.begin() as session:
            session.execute(update(JobRunRow).where(JobRunRow.id == run_id).values(
                finished_at=datetime.now(timezone.utc), ok=ok, detail=None if detail is None else detail[:DETAIL_CHARS]))

    def list_job_runs(self, job: str | None = None, limit: int = 50) -> list[JobRun]:
        """Newest first."""
        query = select(*_COLUMNS).order_by(JobRunRow.started_at.desc(), JobRunRow.id.desc()).limit(limit)
        if job is not None:
            query = query.where(JobRunRow.job == job)
        with self._guard("list job runs"), self._sessions() as session:
            return [JobRun(**row._mapping) for row in session.execute(query)]
