"""The store's tables as typed SQLAlchemy models.

Schema changes go through a new migration in migrations/versions/ (never create_all): the
migrations are what real databases run.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

# Deterministic constraint names, so that later migrations can alter them by name on every backend.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# JSONB on PostgreSQL (binary, indexable); plain JSON text elsewhere.
JsonDoc = JSON().with_variant(JSONB(), "postgresql")


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes in Python on every backend.

    SQLite has no time zone type: values are stored there as naive UTC, which keeps its text
    comparisons (the `since` filters) correct, and get their zone back when read. Naive input
    is taken to be UTC already.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = to_utc(value)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


def to_utc(value: datetime) -> datetime:
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dict[str, Any]: JsonDoc, datetime: UTCDateTime()}


class DiagnosisRow(Base):
    """One diagnosis: summary columns to filter and list by, and the whole document to rebuild it."""

    __tablename__ = "diagnoses"

    id: Mapped[int] = mapped_column(primary_key=True)
    created_at: Mapped[datetime] = mapped_column(index=True)
    target: Mapped[str] = mapped_column(index=True)
    deployment: Mapped[str | None] = mapped_column(index=True)  # advisor.yaml's name, when it was one
    ttft_p95: Mapped[float | None] = mapped_column(Float)  # from the snapshot, for sparklines
    via: Mapped[str]
    model: Mapped[str | None]
    # Explicit: SQLAlchemy 2.0 maps `float` to Float, 2.1 to Double; the migration says Float.
    window_s: Mapped[float] = mapped_column(Float)
    engine_kind: Mapped[str | None]
    engine_version: Mapped[str | None]
    healthy: Mapped[bool]
    top_severity: Mapped[str]
    findings_count: Mapped[int]
    queries: Mapped[int]
    diagnosis: Mapped[dict[str, Any]]
    snapshot: Mapped[dict[str, Any] | None]

    findings: Mapped[list[FindingRow]] = relationship(
        back_populates="diagnosis", cascade="all, delete-orphan", passive_deletes=True, order_by="FindingRow.id"
    )


class FindingRow(Base):
    """One finding of a diagnosis, flattened for history queries (which rule fired, how badly, when)."""

    __tablename__ = "findings"

    id: Mapped[int] = mapped_column(primary_key=True)
    # Indexed: PostgreSQL does not index foreign keys itself, and cascade deletes scan by it.
    diagnosis_id: Mapped[int] = mapped_column(ForeignKey("diagnoses.id", ondelete="CASCADE"), index=True)
    rule_id: Mapped[str] = mapped_column(index=True)
    severity: Mapped[str]
    symptom: Mapped[str]
    top_check_mechanism: Mapped[str | None]
    data: Mapped[dict[str, Any]]

    diagnosis: Mapped[DiagnosisRow] = relationship(back_populates="findings")


# The arms of an A/B experiment; a load run outside any experiment has no arm.
ARMS = ("baseline", "candidate")
# Longer client error messages are cut to this many characters (VARCHAR on PostgreSQL).
ERROR_CHARS = 500


class LoadRunRow(Base):
    """One run of the load generator: what was sent (workload), what came back (summary), and its
    per-request samples. Runs of an A/B experiment carry its id, their arm and their block."""

    __tablename__ = "load_runs"
    __table_args__ = (CheckConstraint("arm IN ('baseline', 'candidate')", name="arm"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    created_at: Mapped[datetime] = mapped_column(index=True)
    target: Mapped[str] = mapped_column(index=True)
    model: Mapped[str]
    workload_name: Mapped[str]
    source: Mapped[str]  # where the workload came from: a file, telemetry, a trace, by hand
    valid: Mapped[bool]
    why_invalid: Mapped[str | None]
    requests: Mapped[int]
    ok: Mapped[int]
    errors: Mapped[int]
    wall_s: Mapped[float] = mapped_column(Float)
    started_at: Mapped[datetime]
    workload: Mapped[dict[str, Any]]
    summary: Mapped[dict[str, Any]]
    manifest: Mapped[dict[str, Any] | None]
    # experiments.id; no foreign key: rows written before migration 0003 hold the experiment's old
    # 14-digit timestamp id here (hence 64 bits; SQLite's INTEGER is 64-bit already).
    experiment_id: Mapped[int | None] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), index=True)
    arm: Mapped[str | None]
    block: Mapped[int | None]

    samples: Mapped[list[RequestSampleRow]] = relationship(
        back_populates="run", cascade="all, delete-orphan", passive_deletes=True, order_by="RequestSampleRow.index"
    )


class RequestSampleRow(Base):
    """One request of a load run, as RequestRecord.to_row() flattens it (less the raw timestamps).
    Times are seconds from the run's start; ttft/tpot/e2e/lag are None where they do not apply."""

    __tablename__ = "request_samples"

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("load_runs.id", ondelete="CASCADE"), index=True)
    index: Mapped[int]
    bucket: Mapped[str]
    status: Mapped[str]
    prompt_tokens: Mapped[int]
    max_tokens: Mapped[int]
    output_tokens: Mapped[int]
    scheduled_s: Mapped[float | None] = mapped_column(Float)
    sent_s: Mapped[float | None] = mapped_column(Float)
    ttft: Mapped[float | None] = mapped_column(Float)
    tpot: Mapped[float | None] = mapped_column(Float)
    e2e: Mapped[float | None] = mapped_column(Float)
    lag: Mapped[float | None] = mapped_column(Float)
    chunks: Mapped[int]
    error: Mapped[str | None] = mapped_column(String(ERROR_CHARS))
    prefix_group: Mapped[int | None]

    run: Mapped[LoadRunRow] = relationship(back_populates="samples")


# What an experiment row's status may be: running while its blocks go on, then how it ended.
EXPERIMENT_STATUSES = ("running", "finished", "aborted", "interrupted", "failed")


class ExperimentRow(Base):
    """One A/B experiment: summary columns to list by, its design as planned, and the whole
    ExperimentResult once it ended. Written when it starts (status running) so that its blocks
    (load_runs with this id) can be followed while it runs."""

    __tablename__ = "experiments"
    __table_args__ = (UniqueConstraint("deployment", "key", name="uq_experiments_deployment"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(String(100))  # the experiment's own id, exp-...
    created_at: Mapped[datetime] = mapped_column(index=True)
    updated_at: Mapped[datetime]
    deployment: Mapped[str] = mapped_column(index=True)
    target: Mapped[str]
    mechanism: Mapped[str]
    value: Mapped[str]
    status: Mapped[str]
    verdict: Mapped[str | None]
    primary_metric: Mapped[str | None]
    ratio: Mapped[float | None] = mapped_column(Float)
    baseline_restored: Mapped[bool | None]
    journal: Mapped[str | None]
    launch_key: Mapped[str | None] = mapped_column(String(64))  # set by the dashboard that started it
    diagnosis_id: Mapped[int | None] = mapped_column(ForeignKey("diagnoses.id", ondelete="SET NULL"), index=True)
    design: Mapped[dict[str, Any]]
    result: Mapped[dict[str, Any] | None]


class CapacityRunRow(Base):
    """One answer of `advisor capacity`: the columns a history is listed and compared by, and the
    whole CapacityResult (advisor/capacity/result.py, a layer above) as its document."""

    __tablename__ = "capacity_runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    created_at: Mapped[datetime] = mapped_column(index=True)
    deployment: Mapped[str | None] = mapped_column(index=True)  # advisor.yaml's name, when it was one
    target: Mapped[str]
    model: Mapped[str]
    workload: Mapped[str]
    status: Mapped[str]
    estimate: Mapped[float | None] = mapped_column(Float)
    low: Mapped[float | None] = mapped_column(Float)
    high: Mapped[float | None] = mapped_column(Float)
    level: Mapped[float] = mapped_column(Float)
    binding: Mapped[str | None]
    requests: Mapped[int]
    seconds: Mapped[float] = mapped_column(Float)
    result: Mapped[dict[str, Any]]


class JobRunRow(Base):
    """One run of a scheduled job in one slot (a diagnosis interval, a weekly report's week).
    (job, slot) is unique: of two advisors on one database, only the first to insert a slot runs it."""

    __tablename__ = "job_runs"
    __table_args__ = (UniqueConstraint("job", "slot", name="uq_job_runs_job"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job: Mapped[str]
    slot: Mapped[str]
    owner: Mapped[str]
    started_at: Mapped[datetime] = mapped_column(index=True)
    finished_at: Mapped[datetime | None]
    ok: Mapped[bool | None]
    detail: Mapped[str | None]
