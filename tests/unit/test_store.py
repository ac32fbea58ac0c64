"""The store on SQLite: round trip, listing, history, migrations, atomicity, bad URLs."""

from __future__ import annotations

import math
import time
from datetime import datetime, timedelta, timezone

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import func, inspect, select, text
from sqlalchemy.orm import Session

import advisor.store.repository as repository
from advisor.diagnosis.model import Check, Diagnosis, Evidence, Finding
from advisor.settings import get_settings
from advisor.store import Store, StoreError, open_store
from advisor.store.tables import Base, DiagnosisRow, FindingRow
from probes import EngineInfo, Signal, Snapshot

TARGET = "http://127.0.0.1:8000"
VERSION_OPTS = {"version_table": "advisor_alembic_version", "compare_type": True}


def check(rule_id: str, mechanism: str, rank: int, held_back: bool = False) -> Check:
    return Check(
        rank=rank, id=f"{rule_id}.{mechanism}", rule_id=rule_id, title=f"try {mechanism}", stage="supply_demand",
        mechanism=mechanism, readout="ttft_p99", score=1.0 / rank, strength=0.5, reason="queue is long",
        held_back=held_back, look_at="vllm:num_requests_waiting", directions=["raise it"],
        evidence=[Evidence(signal="requests_waiting", value=6, text="6 requests waiting")],
    )


def make_diagnosis(target: str = TARGET, findings: int = 2) -> Diagnosis:
    catalog = [
        Finding(
            rule_id="queueing", name="Requests queue", symptom="TTFT high", layer="admission", map_row="1.1",
            severity="severe", severity_value=1.9,
            evidence=[Evidence(signal="ttft_p50", value=1.9, unit="s", op=">", threshold=0.5,
                               threshold_from="slo:ttft_p50", source="histogram_quantile(0.5, ...)",
                               text="TTFT p50 1.9 s > SLO 0.5 s")],
            checks=[check("queueing", "max_num_seqs", 1), check("queueing", "replicas", 2)],
        ),
        Finding(
            rule_id="kv_pressure", name="KV cache full", symptom="preemptions", layer="memory", map_row="2.3",
            severity="moderate",
            evidence=[Evidence(signal="kv_usage", value=0.98, threshold=0.95, text="KV 98 %")],
            # The best rank is held back, so the top check is the next one.
            checks=[check("kv_pressure", "kv_cache_dtype", 3, held_back=True),
                    check("kv_pressure", "gpu_memory_utilization", 4)],
        ),
    ]
    return Diagnosis(
        target=target, via="engine", taken_at=datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc), window_s=10.0,
        model="tiny-llama", engine=EngineInfo(kind="vllm", version="0.32.0", models=["tiny-llama"],
                                              config={"enable_prefix_caching": True}),
        slo={"ttft_p50": 0.5, "tpot_p50": None}, findings=catalog[:findings], problems=["no GPU signals"], queries=7,
    )


def make_snapshot(target: str = TARGET) -> Snapshot:
    return Snapshot(target=target, via="engine", window_s=10.0, model="tiny-llama",
                    signals={"ttft_p50": Signal(name="ttft_p50", value=1.9, unit="s", source="vllm:ttft")})


@pytest.fixture
def url(tmp_path) -> str:
    # A directory that does not exist yet: open_store must create it.
    return f"sqlite:///{tmp_path / 'data' / 'advisor.db'}"


@pytest.fixture
def store(url):
    s = open_store(url)
    yield s
    s.close()


def counts(store: Store) -> tuple[int, int]:
    with Session(store.engine) as s:
        return (s.scalar(select(func.count()).select_from(DiagnosisRow)),
                s.scalar(select(func.count()).select_from(FindingRow)))


def test_round_trip(store):
    diagnosis, snapshot = make_diagnosis(), make_snapshot()
    ident = store.save_diagnosis(diagnosis, snapshot)

    assert store.get_diagnosis(ident) == diagnosis
    assert store.get_snapshot(ident) == snapshot
    [summary] = store.list_diagnoses()
    assert (summary.id, summary.target, summary.via, summary.model, summary.window_s) == (
        ident, TARGET, "engine", "tiny-llama", 10.0)
    assert (summary.engine_kind, summary.engine_version, summary.healthy) == ("vllm", "0.32.0", False)
    assert (summary.top_severity, summary.findings_count, summary.queries) == ("severe", 2, 7)
    assert summary.created_at.tzinfo is not None
    assert abs(summary.created_at - datetime.now(timezone.utc)) < timedelta(minutes=1)
    history = store.findings_history()
    assert [(f.rule_id, f.severity, f.top_check_mechanism, f.diagnosis_id) for f in history] == [
        ("queueing", "severe", "max_num_seqs", ident), ("kv_pressure", "moderate", "gpu_memory_utilization", ident)]


def test_healthy_diagnosis_without_snapshot(store):
    ident = store.save_diagnosis(make_diagnosis(findings=0))
    assert store.get_diagnosis(ident).healthy
    assert store.get_snapshot(ident) is None
    [summary] = store.list_diagnoses()
    assert (summary.healthy, summary.top_severity, summary.findings_count) == (True, "none", 0)
    assert store.findings_history() == []


def test_nan_evidence_is_stored_as_null(store):
    diagnosis = make_diagnosis()
    diagnosis.findings[0].evidence[0].value = math.nan
    ident = store.save_diagnosis(diagnosis)
    assert store.get_diagnosis(ident).findings[0].evidence[0].value is None


def test_list_filters_and_order(store):
    first = store.save_diagnosis(make_diagnosis("http://a:8000"))
    time.sleep(0.01)
    cut = datetime.now(timezone.utc)
    time.sleep(0.01)
    second = store.save_diagnosis(make_diagnosis("http://b:8000"))
    third = store.save_diagnosis(make_diagnosis("http://a:8000", findings=1))

    assert [d.id for d in store.list_diagnoses()] == [third, second, first]
    assert [d.id for d in store.list_diagnoses(target="http://a:8000")] == [third, first]
    assert [d.id for d in store.list_diagnoses(since=cut)] == [third, second]
    # A naive datetime is UTC.
    assert [d.id for d in store.list_diagnoses(since=cut.replace(tzinfo=None))] == [third, second]
    assert [d.id for d in store.list_diagnoses(target="http://a:8000", since=cut)] == [third]
    assert [d.id for d in store.list_diagnoses(limit=2)] == [third, second]
    assert store.list_diagnoses(target="http://nowhere") == []
    with pytest.raises(ValueError):
        store.list_diagnoses(limit=0)


def test_findings_history(store):
    first = store.save_diagnosis(make_diagnosis("http://a:8000"))
    time.sleep(0.01)
    cut = datetime.now(timezone.utc)
    time.sleep(0.01)
    second = store.save_diagnosis(make_diagnosis("http://b:8000", findings=1))

    assert [(f.diagnosis_id, f.rule_id) for f in store.findings_history()] == [
        (first, "queueing"), (first, "kv_pressure"), (second, "queueing")]
    assert [f.diagnosis_id for f in store.findings_history(rule_id="queueing")] == [first, second]
    assert [f.diagnosis_id for f in store.findings_history(rule_id="kv_pressure")] == [first]
    assert [f.diagnosis_id for f in store.findings_history(since=cut)] == [second]
    assert [f.target for f in store.findings_history(target="http://a:8000")] == ["http://a:8000"] * 2
    assert store.findings_history(rule_id="no_such_rule") == []


def test_migrations_create_the_schema(store):
    inspector = inspect(store.engine)
    assert set(inspector.get_table_names()) == {
        "diagnoses", "findings", "load_runs", "request_samples", "experiments", "job_runs", "capacity_runs",
        "advisor_alembic_version"}
    assert {i["name"] for i in inspector.get_indexes("diagnoses")} == {
        "ix_diagnoses_created_at", "ix_diagnoses_target", "ix_diagnoses_deployment"}
    assert {i["name"] for i in inspector.get_indexes("findings")} == {"ix_findings_rule_id", "ix_findings_diagnosis_id"}
    assert {i["name"] for i in inspector.get_indexes("load_runs")} == {
        "ix_load_runs_created_at", "ix_load_runs_target", "ix_load_runs_experiment_id"}
    assert {i["name"] for i in inspector.get_indexes("request_samples")} == {"ix_request_samples_run_id"}
    [fk] = inspector.get_foreign_keys("findings")
    assert (fk["referred_table"], fk["options"].get("ondelete")) == ("diagnoses", "CASCADE")
    [fk] = inspector.get_foreign_keys("request_samples")
    assert (fk["referred_table"], fk["options"].get("ondelete")) == ("load_runs", "CASCADE")
    assert [c["name"] for c in inspector.get_check_constraints("load_runs")] == ["ck_load_runs_arm"]
    with store.engine.connect() as conn:
        assert conn.scalar(text("SELECT version_num FROM advisor_alembic_version")) == "0004"
        # The models in tables.py and the migrations describe the same schema.
        assert compare_metadata(MigrationContext.configure(conn, opts=VERSION_OPTS), Base.metadata) == []


def test_deleting_a_diagnosis_cascades_to_its_findings(store):
    ident = store.save_diagnosis(make_diagnosis())
    with Session(store.engine) as s, s.begin():
        s.execute(DiagnosisRow.__table__.delete().where(DiagnosisRow.id == ident))
    assert counts(store) == (0, 0)


def test_opening_twice_is_idempotent(url):
    with open_store(url) as first:
        ident = first.save_diagnosis(make_diagnosis())
    with open_store(url) as second, open_store(url) as third:
        assert second.get_diagnosis(ident) == third.get_diagnosis(ident)
        assert len(second.list_diagnoses()) == 1


def test_failed_finding_insert_leaves_nothing(store, monkeypatch):
    real = repository.finding_row

    def second_one_breaks(diagnosis_id, finding):
        row = real(diagnosis_id, finding)
        if finding.rule_id == "kv_pressure":
            row.rule_id = None  # NOT NULL: the database refuses it after the diagnosis was inserted
        return row

    monkeypatch.setattr(repository, "finding_row", second_one_breaks)
    with pytest.raises(StoreError, match="cannot save the diagnosis"):
        store.save_diagnosis(make_diagnosis(), make_snapshot())
    assert counts(store) == (0, 0)


def test_python_error_during_save_leaves_nothing(store, monkeypatch):
    def boom(diagnosis_id, finding):
        raise RuntimeError("boom")

    monkeypatch.setattr(repository, "finding_row", boom)
    with pytest.raises(RuntimeError, match="boom"):
        store.save_diagnosis(make_diagnosis())
    assert counts(store) == (0, 0)
    monkeypatch.undo()
    assert store.save_diagnosis(make_diagnosis()) > 0  # the store is still usable


def test_missing_diagnosis(store):
    with pytest.raises(StoreError, match="no diagnosis 42"):
        store.get_diagnosis(42)


@pytest.mark.parametrize("bad", [
    "not a url",
    "postgresql+psycopg://advisor:s3cret@host:notaport/db",
    "mysql://advisor:s3cret@localhost/advisor",
    "nosuchdb://advisor:s3cret@localhost/advisor",
])
def test_malformed_url(bad):
    with pytest.raises(StoreError) as info:
        open_store(bad)
    message = str(info.value)
    assert "\n" not in message and "s3cret" not in message
    assert "URL" in message


def test_unreachable_postgres_names_the_url_without_password():
    with pytest.raises(StoreError) as info:
        open_store("postgresql://advisor:s3cret@127.0.0.1:1/advisor")
    message = str(info.value)
    assert "127.0.0.1:1" in message and "s3cret" not in message and "\n" not in message


def test_default_url_comes_from_settings(tmp_path, monkeypatch):
    monkeypatch.delenv("ADVISOR_DB_URL", raising=False)
    monkeypatch.setenv("ADVISOR_DATA_DIR", str(tmp_path / "nested" / "data"))
    get_settings.cache_clear()
    try:
        with open_store() as store:
            store.save_diagnosis(make_diagnosis())
        assert (tmp_path / "nested" / "data" / "advisor.db").is_file()
        monkeypatch.setenv("ADVISOR_DB_URL", f"sqlite:///{tmp_path / 'other.db'}")
        get_settings.cache_clear()
        with open_store() as store:
            assert store.list_diagnoses() == []
        assert (tmp_path / "other.db").is_file()
    finally:
        get_settings.cache_clear()
