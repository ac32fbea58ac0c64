"""Store: saves diagnoses and reads them back, as summaries, whole, or as a findings history;
saves load runs with their per-request samples, and reads those back as pandas DataFrames or files.
Experiments (experiments.py), scheduled job runs (jobs.py) and capacity runs (capacity.py) are its mixins."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic import BaseModel, ValidationError
from sqlalchemy import Engine, insert, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import sessionmaker

from advisor.diagnosis.model import Diagnosis, ExperimentRef, Finding
from advisor.loadgen.metrics import Summary
from advisor.store.capacity import CapacityMixin
from advisor.store.documents import document, equal, plain
from advisor.store.errors import StoreError, one_line, redact
from advisor.store.experiments import ExperimentsMixin
from advisor.store.jobs import JobsMixin
from advisor.store.tables import ARMS, ERROR_CHARS, DiagnosisRow, FindingRow, LoadRunRow, RequestSampleRow
from probes import Snapshot
from probes.http import redact_url

if TYPE_CHECKING:
    import pandas as pd

    from advisor.loadgen.record import RequestRecord
    from advisor.workload.spec import Workload


@dataclass(frozen=True)
class DiagnosisSummary:
    """One line of a diagnoses listing; the whole document comes from Store.get_diagnosis(id)."""

    id: int
    created_at: datetime
    target: str
    deployment: str | None
    via: str
    model: str | None
    window_s: float
    ttft_p95: float | None
    engine_kind: str | None
    engine_version: str | None
    healthy: bool
    top_severity: str
    findings_count: int
    queries: int


@dataclass(frozen=True)
class FindingRecord:
    """One finding in time, for history and the weekly report."""

    finding_id: int
    diagnosis_id: int
    created_at: datetime
    target: str
    rule_id: str
    severity: str
    symptom: str
    top_check_mechanism: str | None


@dataclass(frozen=True)
class LoadRunSummary:
    """One line of a load-runs listing; the documents come from Store.get_load_run(id)."""

    id: int
    created_at: datetime
    target: str
    model: str
    workload_name: str
    source: str
    valid: bool
    why_invalid: str | None
    requests: int
    ok: int
    errors: int
    wall_s: float
    started_at: datetime
    experiment_id: int | None
    arm: str | None
    block: int | None


class LoadRun(NamedTuple):
    """A saved load run's documents: the workload as sent, its Summary, and the free-form manifest."""

    workload: dict[str, Any]
    summary: Summary
    manifest: dict[str, Any] | None


# The columns of load_samples() and export_samples(), in request_samples' order, with their dtypes:
# floats are NaN where None; prefix_group (Int64) and the strings (string) are pandas' nullable types.
SAMPLE_DTYPES: dict[str, str] = {
    "index": "int64", "bucket": "string", "status": "string", "prompt_tokens": "int64", "max_tokens": "int64",
    "output_tokens": "int64", "scheduled_s": "float64", "sent_s": "float64", "ttft": "float64",
    "tpot": "float64", "e2e": "float64", "lag": "float64", "chunks": "int64", "error": "string",
    "prefix_group": "Int64",
}
SAMPLE_COLUMNS = tuple(SAMPLE_DTYPES)
EXPORT_FORMATS = (".jsonl", ".csv", ".parquet")
# Samples go to the database this many at a time (one executemany each), all in one transaction.
SAMPLE_BATCH = 10_000

_SUMMARY = [getattr(DiagnosisRow, f) for f in DiagnosisSummary.__dataclass_fields__]
_RUN_SUMMARY = [getattr(LoadRunRow, f) for f in LoadRunSummary.__dataclass_fields__]
_SAMPLES = [getattr(RequestSampleRow, c) for c in SAMPLE_COLUMNS]
_HISTORY = [
    FindingRow.id.label("finding_id"), FindingRow.diagnosis_id, DiagnosisRow.created_at, DiagnosisRow.target,
    FindingRow.rule_id, FindingRow.severity, FindingRow.symptom, FindingRow.top_check_mechanism,
]


class Store(ExperimentsMixin, JobsMixin, CapacityMixin):
    """Diagnoses, load runs, experiments, capacity runs and scheduled job runs in a SQL database. Get one from open_store(); close() it when done."""

    def __init__(self, engine: Engine, url: str) -> None:
        self.engine = engine
        self.url = redact(url)
        self._raw_url = url
        # Rows are read into plain objects before the session ends; nothing lazy-loads later.
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    def save_diagnosis(self, diagnosis: Diagnosis, snapshot: Snapshot | None = None,
                       deployment: str | None = None) -> int:
        """Write the diagnosis and all its findings in one transaction; returns the new id.
        `deployment` names the watched deployment (advisor.yaml) or the spec it was of: the
        experiments its checks ran for that deployment are linked to it."""
        with self._guard("save the diagnosis"), self._sessions.begin() as session:
            row = diagnosis_row(diagnosis, snapshot, deployment)
            session.add(row)
            session.flush()  # the diagnosis is inserted first: a failing finding must undo it
            session.add_all(finding_row(row.id, finding) for finding in diagnosis.findings)
            session.flush()
            ident = row.id
        keys = [c.verdict.experiment for c in diagnosis.checks if isinstance(c.verdict, ExperimentRef)]
        if deployment and keys:
            self.link_experiments(ident, deployment, keys)
        return ident

    def list_diagnoses(self, target: str | None = None, since: datetime | None = None,
                       limit: int = 50, deployment: str | None = None) -> list[DiagnosisSummary]:
        """Newest first. `since` is inclusive; a naive datetime is taken as UTC."""
        return self._newest("diagnoses", DiagnosisSummary, _SUMMARY, DiagnosisRow, limit,
                            equal(DiagnosisRow, target=target, deployment=deployment)
                            + ([DiagnosisRow.created_at >= since] if since is not None else []))

    def get_diagnosis_summary(self, diagnosis_id: int) -> DiagnosisSummary:
        with self._guard(f"read diagnosis {diagnosis_id}"), self._sessions() as session:
            found = session.execute(select(*_SUMMARY).where(DiagnosisRow.id == diagnosis_id)).first()
        if found is None:
            raise StoreError(f"no diagnosis {diagnosis_id} in the store at {self.url}")
        return DiagnosisSummary(**found._mapping)

    def get_diagnosis(self, diagnosis_id: int) -> Diagnosis:
        doc = self._document(DiagnosisRow.diagnosis, diagnosis_id)
        return self._validate(Diagnosis, doc, diagnosis_id)

    def get_snapshot(self, diagnosis_id: int) -> Snapshot | None:
        """The snapshot saved with the diagnosis, if one was."""
        doc = self._document(DiagnosisRow.snapshot, diagnosis_id)
        return None if doc is None else self._validate(Snapshot, doc, diagnosis_id)

    def findings_history(self, rule_id: str | None = None, since: datetime | None = None,
                         target: str | None = None, deployment: str | None = None,
                         until: datetime | None = None) -> list[FindingRecord]:
        """Every saved finding, oldest first, optionally of one rule / target / since a time (inclusive)."""
        query = select(*_HISTORY).join(FindingRow.diagnosis).order_by(DiagnosisRow.created_at, FindingRow.id)
        if rule_id is not None:
            query = query.where(FindingRow.rule_id == rule_id)
        if since is not None:
            query = query.where(DiagnosisRow.created_at >= since)
        if target is not None:
            query = query.where(DiagnosisRow.target == target)
        if deployment is not None:
            query = query.where(DiagnosisRow.deployment == deployment)
        if until is not None:
            query = query.where(DiagnosisRow.created_at < until)
        with self._guard("read the findings history"), self._sessions() as session:
            return [FindingRecord(**row._mapping) for row in session.execute(query)]

    def save_load_run(self, workload: Workload, summary: Summary, records: Sequence[RequestRecord], target: str,
                      model: str, started_at: datetime, wall_s: float, manifest: dict[str, Any] | None = None,
                      experiment_id: int | None = None, arm: str | None = None, block: int | None = None) -> int:
        """Write the run and all its request samples in one transaction; returns the new run id.

        `started_at` is when the run began (a naive datetime is taken as UTC). `experiment_id`,
        `arm` ('baseline' or 'candidate') and `block` place the run in an A/B experiment.
        Samples go in by bulk executemany, so that tens of thousands take seconds, not minutes.
        """
        if arm is not None and arm not in ARMS:
            raise ValueError(f"arm must be one of {', '.join(ARMS)} or None, got {arm!r}")
        with self._guard("save the load run"), self._sessions.begin() as session:
            row = load_run_row(workload, summary, target, model, started_at, wall_s, manifest,
                               experiment_id, arm, block)
            session.add(row)
            session.flush()  # the run is inserted first: a failing sample must undo it
            samples = iter(records)
            while batch := [sample_row(row.id, record) for record in islice(samples, SAMPLE_BATCH)]:
                # Core insert of a list: one executemany, no ORM objects per sample.
                session.execute(insert(RequestSampleRow.__table__), batch)
            return row.id

    def list_load_runs(self, target: str | None = None, limit: int = 50,
                       experiment_id: int | None = None) -> list[LoadRunSummary]:
        """Newest first, optionally of one target or one experiment."""
        return self._newest("load runs", LoadRunSummary, _RUN_SUMMARY, LoadRunRow, limit,
                            equal(LoadRunRow, target=target, experiment_id=experiment_id))

    def get_load_run(self, run_id: int) -> LoadRun:
        """The run's workload (as a dict), Summary and manifest; unpacks as a 3-tuple."""
        query = select(LoadRunRow.workload, LoadRunRow.summary, LoadRunRow.manifest).where(LoadRunRow.id == run_id)
        with self._guard(f"read load run {run_id}"), self._sessions() as session:
            found = session.execute(query).first()
        if found is None:
            raise StoreError(f"no load run {run_id} in the store at {self.url}")
        workload, summary, manifest = found
        try:
            return LoadRun(workload, Summary.model_validate(summary), manifest)
        except ValidationError as exc:
            raise StoreError(f"load run {run_id} does not read as a Summary: "
                             f"{one_line(exc)} ({exc.error_count()} errors)") from exc

    def load_samples(self, run_id: int) -> pd.DataFrame:
        """The run's request samples, one row per request in index order, columns SAMPLE_COLUMNS."""
        return _frame(self._sample_rows(run_id))

    def export_samples(self, run_id: int, path: str | Path) -> int:
        """Write the run's samples to `path` as JSON lines, CSV or Parquet, by its extension
        (.jsonl, .csv, .parquet); returns the number of samples written."""
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix not in EXPORT_FORMATS:
            raise StoreError(f"cannot export samples to {path}: unknown extension {suffix or '(none)'!r}; "
                             f"use one of {', '.join(EXPORT_FORMATS)}")
        rows = self._sample_rows(run_id)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if suffix == ".jsonl":
                # By hand, not DataFrame.to_json: that rounds floats to 10 significant digits.
                with path.open("w", encoding="utf-8") as out:
                    for row in rows:
                        out.write(json.dumps(dict(zip(SAMPLE_COLUMNS, row)), ensure_ascii=False) + "\n")
            elif suffix == ".csv":
                _frame(rows).to_csv(path, index=False)
            else:
                _frame(rows).to_parquet(path, index=False)
        except OSError as exc:
            raise StoreError(f"cannot write samples to {path}: {exc.strerror or one_line(exc)}") from exc
        except ImportError as exc:
            raise StoreError(f"cannot write Parquet to {path}: {one_line(exc)} (install pyarrow)") from exc
        return len(rows)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    def _newest(self, what: str, summary: type, columns: list, table: Any, limit: int, where: list) -> list:
        """A listing, newest first (created_at, then id), as `summary` objects."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        query = select(*columns).where(*where).order_by(table.created_at.desc(), table.id.desc()).limit(limit)
        with self._guard(f"list {what}"), self._sessions() as session:
            return [summary(**row._mapping) for row in session.execute(query)]

    def _sample_rows(self, run_id: int) -> list[tuple[Any, ...]]:
        query = select(*_SAMPLES).where(RequestSampleRow.run_id == run_id).order_by(
            RequestSampleRow.index, RequestSampleRow.id)
        with self._guard(f"read the samples of load run {run_id}"), self._sessions() as session:
            if session.get(LoadRunRow, run_id) is None:
                raise StoreError(f"no load run {run_id} in the store at {self.url}")
            return [tuple(row) for row in session.execute(query)]

    def _document(self, column: Any, diagnosis_id: int) -> Any:
        with self._guard(f"read diagnosis {diagnosis_id}"), self._sessions() as session:
            found = session.execute(select(DiagnosisRow.id, column).where(DiagnosisRow.id == diagnosis_id)).first()
        if found is None:
            raise StoreError(f"no diagnosis {diagnosis_id} in the store at {self.url}")
        return found[1]

    def _validate(self, model: type[BaseModel], doc: Any, diagnosis_id: int) -> Any:
        try:
            return model.model_validate(doc)
        except ValidationError as exc:
            # A document written by another version of the advisor, most likely.
            raise StoreError(f"diagnosis {diagnosis_id} does not read as a {model.__name__}: "
                             f"{one_line(exc)} ({exc.error_count()} errors)") from exc

    @contextmanager
    def _guard(self, action: str) -> Iterator[None]:
        """Database failures leave as one-line StoreErrors; transactions roll back on the way out."""
        try:
            yield
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot {action} in the store at {self.url}: {one_line(exc, self._raw_url)}") from exc


def diagnosis_row(diagnosis: Diagnosis, snapshot: Snapshot | None, deployment: str | None = None) -> DiagnosisRow:
    engine = diagnosis.engine
    return DiagnosisRow(
        created_at=datetime.now(timezone.utc),
        target=redact_url(diagnosis.target),
        deployment=deployment,
        ttft_p95=_num(_signal(snapshot, "ttft_p95")),
        via=diagnosis.via,
        model=diagnosis.model,
        window_s=diagnosis.window_s,
        engine_kind=engine.kind,
        engine_version=engine.version,
        healthy=diagnosis.healthy,
        top_severity=diagnosis.top_severity,
        findings_count=len(diagnosis.findings),
        queries=diagnosis.queries,
        diagnosis=document(diagnosis),
        snapshot=None if snapshot is None else document(snapshot),
    )


def _signal(snapshot: Snapshot | None, name: str) -> float | None:
    signal = snapshot.signals.get(name) if snapshot is not None else None
    value = getattr(signal, "value", None)
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def finding_row(diagnosis_id: int, finding: Finding) -> FindingRow:
    # The check an SRE would try first: the best-ranked one that is not held back.
    top = min(finding.checks, key=lambda c: (c.held_back, c.rank), default=None)
    return FindingRow(
        diagnosis_id=diagnosis_id,
        rule_id=finding.rule_id,
        severity=finding.severity,
        symptom=finding.symptom,
        top_check_mechanism=top.mechanism if top else None,
        data=document(finding),
    )


def load_run_row(workload: Workload, summary: Summary, target: str, model: str, started_at: datetime,
                 wall_s: float, manifest: dict[str, Any] | None, experiment_id: int | None, arm: str | None,
                 block: int | None) -> LoadRunRow:
    overall, generator = summary.overall, summary.generator
    return LoadRunRow(
        created_at=datetime.now(timezone.utc),
        target=redact_url(target),
        model=model,
        workload_name=workload.name,
        source=workload.source,
        valid=generator.valid,
        why_invalid=generator.why_invalid,
        requests=overall.requests,
        ok=overall.ok,
        errors=overall.errors,
        wall_s=wall_s,
        started_at=started_at,
        workload=document(workload),
        summary=document(summary),
        manifest=None if manifest is None else plain(manifest),
        experiment_id=experiment_id,
        arm=arm,
        block=block,
    )


def sample_row(run_id: int, record: RequestRecord) -> dict[str, Any]:
    """RequestRecord.to_row() as request_samples stores it, without to_row's copy of every chunk time."""
    error = record.error
    return {
        "run_id": run_id, "index": record.index, "bucket": record.bucket, "status": record.status,
        "prompt_tokens": record.prompt_tokens, "max_tokens": record.max_tokens,
        "output_tokens": record.output_tokens, "scheduled_s": _num(record.scheduled_s),
        "sent_s": _num(record.sent_s), "ttft": _num(record.ttft), "tpot": _num(record.tpot),
        "e2e": _num(record.e2e), "lag": _num(record.lag), "chunks": len(record.chunk_s),
        "error": None if error is None else error[:ERROR_CHARS], "prefix_group": record.prefix_group,
    }


def _num(value: float | None) -> float | None:
    # NaN means "no value": stored as NULL on every backend (SQLite would anyway, PostgreSQL would not).
    return None if value is None or value != value else value


def _frame(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    import pandas as pd  # here, not at the top: opening the store for a diagnosis need not load pandas

    frame = pd.DataFrame.from_records(rows, columns=list(SAMPLE_COLUMNS))
    return frame.astype(SAMPLE_DTYPES)
