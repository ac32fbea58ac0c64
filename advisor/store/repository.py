"""Store: saves diagnoses and reads them back, as summaries, whole, or as a findings history."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel, ValidationError
from sqlalchemy import Engine, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import sessionmaker

from advisor.diagnosis.model import Diagnosis, Finding
from advisor.store.errors import StoreError, one_line, redact
from advisor.store.tables import DiagnosisRow, FindingRow
from probes import Snapshot


@dataclass(frozen=True)
class DiagnosisSummary:
    """One line of a diagnoses listing; the whole document comes from Store.get_diagnosis(id)."""

    id: int
    created_at: datetime
    target: str
    via: str
    model: str | None
    window_s: float
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


_SUMMARY = [getattr(DiagnosisRow, f) for f in DiagnosisSummary.__dataclass_fields__]
_HISTORY = [
    FindingRow.id.label("finding_id"), FindingRow.diagnosis_id, DiagnosisRow.created_at, DiagnosisRow.target,
    FindingRow.rule_id, FindingRow.severity, FindingRow.symptom, FindingRow.top_check_mechanism,
]


class Store:
    """Diagnoses in a SQL database. Get one from open_store(); close() it when done."""

    def __init__(self, engine: Engine, url: str) -> None:
        self.engine = engine
        self.url = redact(url)
        self._raw_url = url
        # Rows are read into plain objects before the session ends; nothing lazy-loads later.
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    def save_diagnosis(self, diagnosis: Diagnosis, snapshot: Snapshot | None = None) -> int:
        """Write the diagnosis and all its findings in one transaction; returns the new id."""
        with self._guard("save the diagnosis"), self._sessions.begin() as session:
            row = diagnosis_row(diagnosis, snapshot)
            session.add(row)
            session.flush()  # the diagnosis is inserted first: a failing finding must undo it
            session.add_all(finding_row(row.id, finding) for finding in diagnosis.findings)
            session.flush()
            return row.id

    def list_diagnoses(self, target: str | None = None, since: datetime | None = None,
                       limit: int = 50) -> list[DiagnosisSummary]:
        """Newest first. `since` is inclusive; a naive datetime is taken as UTC."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        query = select(*_SUMMARY).order_by(DiagnosisRow.created_at.desc(), DiagnosisRow.id.desc()).limit(limit)
        if target is not None:
            query = query.where(DiagnosisRow.target == target)
        if since is not None:
            query = query.where(DiagnosisRow.created_at >= since)
        with self._guard("list diagnoses"), self._sessions() as session:
            return [DiagnosisSummary(**row._mapping) for row in session.execute(query)]

    def get_diagnosis(self, diagnosis_id: int) -> Diagnosis:
        doc = self._document(DiagnosisRow.diagnosis, diagnosis_id)
        return self._validate(Diagnosis, doc, diagnosis_id)

    def get_snapshot(self, diagnosis_id: int) -> Snapshot | None:
        """The snapshot saved with the diagnosis, if one was."""
        doc = self._document(DiagnosisRow.snapshot, diagnosis_id)
        return None if doc is None else self._validate(Snapshot, doc, diagnosis_id)

    def findings_history(self, rule_id: str | None = None, since: datetime | None = None,
                         target: str | None = None) -> list[FindingRecord]:
        """Every saved finding, oldest first, optionally of one rule / target / since a time (inclusive)."""
        query = select(*_HISTORY).join(FindingRow.diagnosis).order_by(DiagnosisRow.created_at, FindingRow.id)
        if rule_id is not None:
            query = query.where(FindingRow.rule_id == rule_id)
        if since is not None:
            query = query.where(DiagnosisRow.created_at >= since)
        if target is not None:
            query = query.where(DiagnosisRow.target == target)
        with self._guard("read the findings history"), self._sessions() as session:
            return [FindingRecord(**row._mapping) for row in session.execute(query)]

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

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


def diagnosis_row(diagnosis: Diagnosis, snapshot: Snapshot | None) -> DiagnosisRow:
    engine = diagnosis.engine
    return DiagnosisRow(
        created_at=datetime.now(timezone.utc),
        target=diagnosis.target,
        via=diagnosis.via,
        model=diagnosis.model,
        window_s=diagnosis.window_s,
        engine_kind=engine.kind,
        engine_version=engine.version,
        healthy=diagnosis.healthy,
        top_severity=diagnosis.top_severity,
        findings_count=len(diagnosis.findings),
        queries=diagnosis.queries,
        diagnosis=_document(diagnosis),
        snapshot=None if snapshot is None else _document(snapshot),
    )


def finding_row(diagnosis_id: int, finding: Finding) -> FindingRow:
    # The check an SRE would try first: the best-ranked one that is not held back.
    top = min(finding.checks, key=lambda c: (c.held_back, c.rank), default=None)
    return FindingRow(
        diagnosis_id=diagnosis_id,
        rule_id=finding.rule_id,
        severity=finding.severity,
        symptom=finding.symptom,
        top_check_mechanism=top.mechanism if top else None,
        data=_document(finding),
    )


def _document(model: BaseModel) -> dict[str, Any]:
    # model_dump(mode="json") keeps NaN/Inf as floats, which PostgreSQL's JSON types reject;
    # pydantic's JSON serialiser writes them as null, so documents are valid JSON everywhere.
    return json.loads(model.model_dump_json())
