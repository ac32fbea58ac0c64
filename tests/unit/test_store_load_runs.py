"""Load runs in the store on SQLite: round trip, listing, atomicity, exports, bulk size, migration from 0001."""

from __future__ import annotations

import json
import math
import random
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pandas as pd
import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, func, inspect, select, text
from sqlalchemy.orm import Session

import advisor.store.repository as repository
from advisor.loadgen.metrics import Summary, summarize
from advisor.loadgen.record import RequestRecord
from advisor.loadgen.runner import Run
from advisor.store import LoadRunSummary, Store, StoreError, open_store
from advisor.store.connect import MIGRATIONS
from advisor.store.repository import SAMPLE_COLUMNS, SAMPLE_DTYPES
from advisor.store.tables import LoadRunRow, RequestSampleRow
from advisor.workload.spec import Workload
from tests.unit.test_store import make_diagnosis, make_snapshot

TARGET = "http://127.0.0.1:8000"
STARTED = datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)


def make_workload(name: str = "chat-mix") -> Workload:
    return Workload.model_validate({
        "name": name, "model": "tiny-llama", "source": "file chat-mix.yaml", "requests": 300, "seed": 7,
        "buckets": [{"name": "short", "prompt_tokens": [16, 64], "output_tokens": 8},
                    {"prompt_tokens": 256, "output_tokens": [32, 64], "weight": 0.5}],
        "prefix": {"groups": 3, "tokens": 8, "share": 0.5},
        "arrival": {"kind": "poisson", "rate": 20.0},
        "cancellation": {"rate": 0.05},
    })


def make_records(n: int, seed: int = 1, chunks: int = 12) -> list[RequestRecord]:
    """Synthetic records with every status, None where a request never got that far, odd error texts."""
    rng = random.Random(seed)
    records = []
    for i in range(n):
        scheduled = i * 0.05
        record = RequestRecord(index=i, bucket=rng.choice(["short", "p256/o32-64"]),
                               prompt_tokens=rng.randint(16, 256), max_tokens=rng.randint(8, 64),
                               scheduled_s=scheduled, prefix_group=rng.choice([None, 0, 1, 2]))
        kind = i % 10
        if kind == 9:  # never sent
            records.append(record)
            continue
        record.sent_s = scheduled + rng.uniform(0.0001, 0.003)
        if kind == 8:
            record.status, record.http_status = "error", 500
            record.error = f'HTTPStatusError: 500, "boom" ü\nline two {i}'
        else:
            record.first_token_s = record.sent_s + rng.uniform(0.01, 0.5)
            record.chunk_s = [record.first_token_s + k * rng.uniform(0.005, 0.02) for k in range(chunks)]
            record.last_token_s = record.chunk_s[-1]
            record.output_tokens = 1 if kind == 7 else chunks
            record.status = "cancelled" if kind == 6 else "ok"
        records.append(record)
    return records


def make_summary(records: list[RequestRecord]) -> Summary:
    return summarize(Run(records=records, started_at=0.0, wall_s=20.0, planned_span_s=records[-1].scheduled_s))


def expected_frame(records: list[RequestRecord]) -> pd.DataFrame:
    """What load_samples must give: RequestRecord.to_row(), the stored columns, in index order."""
    rows = [r.to_row() for r in sorted(records, key=lambda r: r.index)]
    return pd.DataFrame(rows, columns=list(SAMPLE_COLUMNS)).astype(SAMPLE_DTYPES)


def save(store: Store, records: list[RequestRecord], target: str = TARGET, **kw) -> int:
    return store.save_load_run(make_workload(), make_summary(records), records, target=target, model="tiny-llama",
                               started_at=STARTED, wall_s=21.5, **kw)


def counts(store: Store) -> tuple[int, int]:
    with Session(store.engine) as s:
        return (s.scalar(select(func.count()).select_from(LoadRunRow)),
                s.scalar(select(func.count()).select_from(RequestSampleRow)))


@pytest.fixture
def url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'data' / 'advisor.db'}"


@pytest.fixture
def store(url):
    s = open_store(url)
    yield s
    s.close()


def test_round_trip(store):
    records = make_records(300)
    workload, summary = make_workload(), make_summary(records)
    manifest = {"engine": {"kind": "vllm", "version": "0.32.0"}, "nan": math.nan, "path": Path("a/b.yaml")}
    ident = store.save_load_run(workload, summary, records, target=TARGET, model="tiny-llama",
                                started_at=STARTED, wall_s=21.5, manifest=manifest)

    got_workload, got_summary, got_manifest = store.get_load_run(ident)
    assert got_workload == workload.model_dump(mode="json")
    assert Workload.model_validate(got_workload) == workload
    assert got_summary == summary
    # Free-form, but stored as plain JSON: NaN as null, other objects as their text.
    assert got_manifest == {"engine": {"kind": "vllm", "version": "0.32.0"}, "nan": None, "path": "a/b.yaml"}

    [run] = store.list_load_runs()
    assert isinstance(run, LoadRunSummary)
    assert (run.id, run.target, run.model, run.workload_name, run.source) == (
        ident, TARGET, "tiny-llama", "chat-mix", "file chat-mix.yaml")
    assert (run.valid, run.why_invalid) == (summary.generator.valid, summary.generator.why_invalid)
    assert (run.requests, run.ok, run.errors) == (270, 210, 30)
    assert (run.requests, run.ok, run.errors) == (
        summary.overall.requests, summary.overall.ok, summary.overall.errors)
    assert (run.wall_s, run.started_at) == (21.5, STARTED)
    assert (run.experiment_id, run.arm, run.block) == (None, None, None)
    assert abs(run.created_at - datetime.now(timezone.utc)) < timedelta(minutes=1)

    samples = store.load_samples(ident)
    assert list(samples.columns) == list(SAMPLE_COLUMNS)
    assert len(samples) == 300
    pd.testing.assert_frame_equal(samples, expected_frame(records))
    # None stays missing: never sent means no sent_s, errors have no TTFT, one token has no TPOT.
    assert samples.loc[9, ["sent_s", "ttft", "lag"]].isna().all()
    assert samples.loc[8, "status"] == "error" and pd.isna(samples.loc[8, "ttft"])
    assert pd.isna(samples.loc[7, "tpot"]) and samples.loc[7, "ttft"] > 0


def test_started_at_in_another_zone_and_naive_are_utc(store):
    records = make_records(10)
    east = STARTED.astimezone(timezone(timedelta(hours=5)))
    a = store.save_load_run(make_workload(), make_summary(records), records, target=TARGET, model="m",
                            started_at=east, wall_s=1.0)
    b = store.save_load_run(make_workload(), make_summary(records), records, target=TARGET, model="m",
                            started_at=STARTED.replace(tzinfo=None), wall_s=1.0)
    started = {r.id: r.started_at for r in store.list_load_runs()}
    assert started == {a: STARTED, b: STARTED}
    assert started[a].tzinfo is not None


def test_list_filters_order_and_experiment_fields(store):
    records = make_records(20)
    first = save(store, records, target="http://a:8000")
    second = save(store, records, target="http://b:8000", experiment_id=7, arm="baseline", block=0)
    third = save(store, records, target="http://a:8000", experiment_id=7, arm="candidate", block=0)

    assert [r.id for r in store.list_load_runs()] == [third, second, first]
    assert [r.id for r in store.list_load_runs(target="http://a:8000")] == [third, first]
    assert [r.id for r in store.list_load_runs(limit=1)] == [third]
    assert [(r.id, r.arm, r.block) for r in store.list_load_runs(experiment_id=7)] == [
        (third, "candidate", 0), (second, "baseline", 0)]
    assert store.list_load_runs(target="http://nowhere") == []
    with pytest.raises(ValueError):
        store.list_load_runs(limit=0)
    with pytest.raises(ValueError, match="arm"):
        save(store, records, arm="treatment")
    assert counts(store) == (3, 60)


def test_run_without_samples(store):
    empty = store.save_load_run(make_workload(), make_summary(make_records(1)), [], target=TARGET, model="m",
                                started_at=STARTED, wall_s=0.0)
    samples = store.load_samples(empty)
    assert samples.empty and list(samples.columns) == list(SAMPLE_COLUMNS)
    assert dict(samples.dtypes.astype(str)) == SAMPLE_DTYPES


def test_long_error_is_cut_to_the_column(store):
    records = make_records(10)
    records[8].error = "x" * 2000
    ident = save(store, records)
    assert store.load_samples(ident).loc[8, "error"] == "x" * 500


def test_missing_run(store):
    with pytest.raises(StoreError, match="no load run 42"):
        store.get_load_run(42)
    with pytest.raises(StoreError, match="no load run 42"):
        store.load_samples(42)
    with pytest.raises(StoreError, match="no load run 42"):
        store.export_samples(42, "samples.csv")


def test_failed_sample_insert_leaves_no_run(store, monkeypatch):
    real = repository.sample_row

    def one_breaks(run_id, record):
        row = real(run_id, record)
        if record.index == 250:
            row["status"] = None  # NOT NULL: refused by the database after the run and 2 batches went in
        return row

    monkeypatch.setattr(repository, "SAMPLE_BATCH", 100)
    monkeypatch.setattr(repository, "sample_row", one_breaks)
    with pytest.raises(StoreError, match="cannot save the load run") as info:
        save(store, make_records(300))
    assert "\n" not in str(info.value)
    assert counts(store) == (0, 0)
    monkeypatch.setattr(repository, "sample_row", real)
    assert save(store, make_records(300)) > 0  # the store is still usable
    assert counts(store) == (1, 300)


def test_python_error_during_sample_insert_leaves_no_run(store, monkeypatch):
    real = repository.sample_row

    def boom(run_id, record):
        if record.index == 150:
            raise RuntimeError("boom")
        return real(run_id, record)

    monkeypatch.setattr(repository, "SAMPLE_BATCH", 100)
    monkeypatch.setattr(repository, "sample_row", boom)
    with pytest.raises(RuntimeError, match="boom"):
        save(store, make_records(300))
    assert counts(store) == (0, 0)


def test_deleting_a_run_cascades_to_its_samples(store):
    keep = save(store, make_records(30))
    gone = save(store, make_records(40))
    with Session(store.engine) as s, s.begin():
        s.execute(LoadRunRow.__table__.delete().where(LoadRunRow.id == gone))
    assert counts(store) == (1, 30)
    assert len(store.load_samples(keep)) == 30


@pytest.mark.parametrize("ext", [".jsonl", ".csv", ".parquet", ".CSV"])
def test_export_reads_back_equal(store, tmp_path, ext):
    records = make_records(300)
    ident = save(store, records)
    path = tmp_path / "out" / f"samples{ext}"
    assert store.export_samples(ident, path) == 300

    if ext == ".jsonl":
        lines = path.read_text(encoding="utf-8").splitlines()
        assert len(lines) == 300 and list(json.loads(lines[0])) == list(SAMPLE_COLUMNS)
        back = pd.read_json(path, lines=True, dtype=False)
    elif ext.lower() == ".csv":
        back = pd.read_csv(path)
    else:
        back = pd.read_parquet(path)
    assert list(back.columns) == list(SAMPLE_COLUMNS)
    back = back.astype(SAMPLE_DTYPES)
    pd.testing.assert_frame_equal(back, store.load_samples(ident))
    pd.testing.assert_frame_equal(back, expected_frame(records))


def test_export_unknown_extension(store, tmp_path):
    ident = save(store, make_records(5))
    for name in ("samples.xlsx", "samples"):
        with pytest.raises(StoreError, match=r"unknown extension .*\.jsonl, \.csv, \.parquet"):
            store.export_samples(ident, tmp_path / name)
        assert not (tmp_path / name).exists()


def test_fifty_thousand_samples(store):
    records = make_records(50_000, chunks=20)
    summary = make_summary(records)
    start = time.perf_counter()
    ident = store.save_load_run(make_workload(), summary, records, target=TARGET, model="tiny-llama",
                                started_at=STARTED, wall_s=2500.0)
    elapsed = time.perf_counter() - start
    print(f"saved 50,000 samples in {elapsed:.2f} s")
    assert counts(store) == (1, 50_000)
    samples = store.load_samples(ident)
    assert len(samples) == 50_000 and samples["index"].tolist() == list(range(50_000))


def upgrade_to(url: str, revision: str) -> None:
    """What open_store() does, but stopping at `revision`: a database as an older advisor left it."""
    engine = create_engine(url)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS).replace("%", "%%"))
    try:
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.upgrade(config, revision)
    finally:
        engine.dispose()


def test_upgrade_from_0001_keeps_diagnoses(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade_to(url, "0001")
    engine = create_engine(url)
    assert set(inspect(engine).get_table_names()) == {"diagnoses", "findings", "advisor_alembic_version"}
    # Written as an advisor at 0001 did: the columns of that revision only.
    from advisor.store.repository import diagnosis_row, finding_row
    from advisor.store.tables import DiagnosisRow, FindingRow

    diagnosis, snapshot = make_diagnosis(), make_snapshot()
    row = diagnosis_row(diagnosis, snapshot)
    later = {"id", "deployment", "ttft_p95"}  # added by 0003
    with engine.begin() as conn:
        ident = conn.execute(DiagnosisRow.__table__.insert().values(
            {c.name: getattr(row, c.name) for c in DiagnosisRow.__table__.columns if c.name not in later})).inserted_primary_key[0]
        for finding in diagnosis.findings:
            f = finding_row(ident, finding)
            conn.execute(FindingRow.__table__.insert().values(
                {c.name: getattr(f, c.name) for c in FindingRow.__table__.columns if c.name != "id"}))
    engine.dispose()

    with open_store(url) as store:
        with store.engine.connect() as conn:
            assert conn.scalar(text("SELECT version_num FROM advisor_alembic_version")) == "0004"
        assert store.get_diagnosis_summary(ident).deployment is None
        assert {"load_runs", "request_samples"} <= set(inspect(store.engine).get_table_names())
        assert store.get_diagnosis(ident) == diagnosis
        assert store.get_snapshot(ident) == snapshot
        assert [d.id for d in store.list_diagnoses()] == [ident]
        assert len(store.findings_history()) == 2
        run = save(store, make_records(20))
        assert len(store.load_samples(run)) == 20
