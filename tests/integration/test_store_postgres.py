"""The store on a real PostgreSQL: a throwaway cluster started by this module, on 127.0.0.1 only."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import func, inspect, select
from sqlalchemy.orm import Session

import advisor.store.repository as repository
from advisor.diagnosis.model import Check, Diagnosis, Evidence, Finding
from advisor.store import StoreError, open_store
from advisor.store.repository import SAMPLE_COLUMNS
from advisor.store.tables import Base, DiagnosisRow, FindingRow, LoadRunRow, RequestSampleRow
from probes import EngineInfo, Signal, Snapshot
from tests.unit.test_store_load_runs import STARTED, expected_frame, make_records, make_summary, make_workload

# One worker runs the whole module (scripts/test.sh: --dist loadfile), so its server starts once.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

SETUP_HINT = "PostgreSQL server binaries (initdb, pg_ctl) not found: run scripts/setup.sh"


def pg_bindir() -> Path:
    """Where initdb lives: pg_config's bindir, else Debian's versioned directories, else PATH."""
    candidates: list[Path] = []
    if pg_config := shutil.which("pg_config"):
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
        if out.returncode == 0:
            candidates.append(Path(out.stdout.strip()))
    # Newest version first: sort by the numeric version directory.
    candidates += [Path(p).parent for p in sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                                                  key=lambda p: int(Path(p).parts[-3].split(".")[0]), reverse=True)]
    if initdb := shutil.which("initdb"):
        candidates.append(Path(initdb).resolve().parent)
    for bindir in candidates:
        if (bindir / "initdb").is_file() and (bindir / "pg_ctl").is_file():
            return bindir
    pytest.fail(SETUP_HINT, pytrace=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """initdb + pg_ctl in a private directory. PostgreSQL refuses to run as root, so as root every
    server command runs as the `postgres` OS user, who owns the directory."""

    def __init__(self) -> None:
        self.bindir = pg_bindir()
        self.as_postgres = os.geteuid() == 0
        # Not pytest's tmp_path: its parents are private to root, so `postgres` could not reach it.
        self.dir = Path(tempfile.mkdtemp(prefix="advisor-pg-"))
        if self.as_postgres:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                pytest.fail("running as root needs the `postgres` OS user: run scripts/setup.sh", pytrace=False)
            os.chown(self.dir, user.pw_uid, user.pw_gid)
        self.data, self.log = self.dir / "data", self.dir / "server.log"
        self.port = free_port()

    def run(self, tool: str, *args: str) -> None:
        cmd = [str(self.bindir / tool), *args]
        if self.as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        out = subprocess.run(cmd, cwd=self.dir, capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            log = self.log.read_text()[-2000:] if self.log.exists() else ""
            pytest.fail(f"{tool} failed ({out.returncode}): {out.stderr.strip() or out.stdout.strip()}\n{log}",
                        pytrace=False)

    def start(self) -> None:
        # trust auth is safe here: the server listens on 127.0.0.1 and a socket in a private dir.
        self.run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-locale",
                 "-E", "UTF8", "--no-sync")
        # fsync off: a throwaway cluster need not survive a crash, and tests run faster.
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -F"
        self.run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "60", "start")

    def stop(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self.run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def recreate(self, database: str) -> None:
        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres",
                             autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{database}"')


@pytest.fixture(scope="module")
def pg_cluster() -> Iterator[Cluster]:
    cluster = Cluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def pg_url(pg_cluster) -> str:
    """A fresh, empty `advisor` database for each test."""
    pg_cluster.recreate("advisor")
    return pg_cluster.url("advisor")


def make_diagnosis() -> Diagnosis:
    def check(rule_id: str, mechanism: str, rank: int, held_back: bool = False) -> Check:
        return Check(rank=rank, id=f"{rule_id}.{mechanism}", rule_id=rule_id, title=mechanism,
                     stage="supply_demand", mechanism=mechanism, readout="ttft_p50", score=1.0, strength=None,
                     reason="why", held_back=held_back, look_at="queue", directions=["raise it"])

    return Diagnosis(
        target="http://127.0.0.1:8000", via="prometheus", taken_at=datetime(2025, 3, 1, tzinfo=timezone.utc),
        window_s=60.0, model="tiny-llama", engine=EngineInfo(kind="vllm", version="0.32.0"),
        slo={"ttft_p50": 0.5}, queries=3,
        findings=[
            Finding(rule_id="queueing", name="Queue", symptom="TTFT high", layer="admission", map_row="1.1",
                    severity="critical",
                    evidence=[Evidence(signal="ttft_p50", value=float("nan"), unit="s", text="NaN must not break")],
                    checks=[check("queueing", "max_num_seqs", 1)]),
            Finding(rule_id="kv_pressure", name="KV", symptom="preemptions", layer="memory", map_row="2.3",
                    severity="low", evidence=[Evidence(signal="kv_usage", value="ü-unicode", text="KV ✓")],
                    checks=[check("kv_pressure", "kv_cache_dtype", 2, held_back=True),
                            check("kv_pressure", "gpu_memory_utilization", 3)]),
        ],
    )


def counts(engine) -> tuple[int, int]:
    with Session(engine) as s:
        return (s.scalar(select(func.count()).select_from(DiagnosisRow)),
                s.scalar(select(func.count()).select_from(FindingRow)))


def test_round_trip(pg_url):
    diagnosis = make_diagnosis()
    snapshot = Snapshot(target=diagnosis.target, via="prometheus", window_s=60.0,
                        signals={"ttft_p50": Signal(name="ttft_p50", value=1.5, unit="s", source="q")})
    with open_store(pg_url) as store:
        ident = store.save_diagnosis(diagnosis, snapshot)
        expected = diagnosis.model_copy(deep=True)
        expected.findings[0].evidence[0].value = None  # NaN is stored as JSON null
        assert store.get_diagnosis(ident) == expected
        assert store.get_snapshot(ident) == snapshot
        [summary] = store.list_diagnoses(target=diagnosis.target)
        assert (summary.id, summary.top_severity, summary.findings_count, summary.healthy) == (
            ident, "critical", 2, False)
        assert summary.created_at.tzinfo is not None
        assert store.list_diagnoses(since=summary.created_at) == [summary]
        assert [(f.rule_id, f.top_check_mechanism) for f in store.findings_history()] == [
            ("queueing", "max_num_seqs"), ("kv_pressure", "gpu_memory_utilization")]
        assert [f.diagnosis_id for f in store.findings_history(rule_id="kv_pressure")] == [ident]


def test_schema_and_idempotent_open(pg_url):
    with open_store(pg_url) as first:
        ident = first.save_diagnosis(make_diagnosis())
    with open_store(pg_url) as store:
        assert store.get_diagnosis(ident).target == "http://127.0.0.1:8000"
        inspector = inspect(store.engine)
        assert set(inspector.get_table_names()) == {
            "diagnoses", "findings", "load_runs", "request_samples", "experiments", "job_runs",
            "capacity_runs", "advisor_alembic_version"}
        assert [c["name"] for c in inspector.get_check_constraints("load_runs")] == ["ck_load_runs_arm"]
        columns = {c["name"]: c["type"].__class__.__name__ for c in inspector.get_columns("diagnoses")}
        assert columns["diagnosis"] == "JSONB"
        assert {c["name"]: c["type"].__class__.__name__ for c in inspector.get_columns("load_runs")}[
            "experiment_id"] == "BIGINT"
        with store.engine.connect() as conn:
            opts = {"version_table": "advisor_alembic_version", "compare_type": True}
            assert compare_metadata(MigrationContext.configure(conn, opts=opts), Base.metadata) == []


def test_failed_finding_insert_leaves_nothing(pg_url, monkeypatch):
    real = repository.finding_row

    def second_one_breaks(diagnosis_id, finding):
        row = real(diagnosis_id, finding)
        if finding.rule_id == "kv_pressure":
            row.rule_id = None  # NOT NULL: refused by the server after the diagnosis was inserted
        return row

    monkeypatch.setattr(repository, "finding_row", second_one_breaks)
    with open_store(pg_url) as store:
        with pytest.raises(StoreError, match="cannot save the diagnosis") as info:
            store.save_diagnosis(make_diagnosis())
        assert "\n" not in str(info.value)
        assert counts(store.engine) == (0, 0)
        monkeypatch.undo()
        assert store.save_diagnosis(make_diagnosis()) > 0
        assert counts(store.engine) == (1, 2)


def test_missing_database_is_a_store_error(pg_cluster):
    with pytest.raises(StoreError, match="cannot open the store at postgresql"):
        open_store(pg_cluster.url("no_such_database"))


def test_load_run_round_trip(pg_url, tmp_path):
    records = make_records(400)
    workload, summary = make_workload(), make_summary(records)
    manifest = {"engine": {"kind": "vllm", "version": "0.32.0"}, "nan": float("nan"), "note": "ü ✓"}
    with open_store(pg_url) as store:
        ident = store.save_load_run(workload, summary, records, target="http://127.0.0.1:8000", model="tiny-llama",
                                    started_at=STARTED, wall_s=21.5, manifest=manifest,
                                    experiment_id=3, arm="candidate", block=1)
        got_workload, got_summary, got_manifest = store.get_load_run(ident)
        assert got_workload == workload.model_dump(mode="json")
        assert got_summary == summary
        assert got_manifest == {"engine": {"kind": "vllm", "version": "0.32.0"}, "nan": None, "note": "ü ✓"}
        [run] = store.list_load_runs(target="http://127.0.0.1:8000")
        assert (run.id, run.started_at, run.wall_s, run.workload_name, run.source) == (
            ident, STARTED, 21.5, "chat-mix", "file chat-mix.yaml")
        assert (run.requests, run.ok, run.errors, run.valid) == (
            summary.overall.requests, summary.overall.ok, summary.overall.errors, summary.generator.valid)
        assert (run.experiment_id, run.arm, run.block) == (3, "candidate", 1)
        assert run.created_at.tzinfo is not None
        assert store.list_load_runs(experiment_id=4) == []

        samples = store.load_samples(ident)
        pd.testing.assert_frame_equal(samples, expected_frame(records))
        for ext, read in ((".parquet", pd.read_parquet), (".csv", pd.read_csv),
                          (".jsonl", lambda p: pd.read_json(p, lines=True, dtype=False))):
            path = tmp_path / f"samples{ext}"
            assert store.export_samples(ident, path) == 400
            back = read(path)
            assert list(back.columns) == list(SAMPLE_COLUMNS)
            pd.testing.assert_frame_equal(back.astype(samples.dtypes.to_dict()), samples)


def test_failed_sample_insert_leaves_no_run(pg_url, monkeypatch):
    real = repository.sample_row

    def one_breaks(run_id, record):
        row = real(run_id, record)
        if record.index == 250:
            row["status"] = None  # NOT NULL: refused by the server after the run and 2 batches went in
        return row

    monkeypatch.setattr(repository, "SAMPLE_BATCH", 100)
    monkeypatch.setattr(repository, "sample_row", one_breaks)
    records = make_records(300)
    with open_store(pg_url) as store:
        with pytest.raises(StoreError, match="cannot save the load run") as info:
            store.save_load_run(make_workload(), make_summary(records), records, target="t", model="m",
                                started_at=STARTED, wall_s=1.0)
        assert "\n" not in str(info.value)
        with Session(store.engine) as s:
            assert s.scalar(select(func.count()).select_from(LoadRunRow)) == 0
            assert s.scalar(select(func.count()).select_from(RequestSampleRow)) == 0


# Experiments and job runs: the same checks as on SQLite (tests/unit/test_store_experiments.py).
def test_experiments_round_trip_on_postgres(pg_url):
    from tests.unit.test_store_experiments import check_experiment_round_trip

    check_experiment_round_trip(pg_url)


def test_legacy_experiment_numbers_fit_on_postgres(pg_url):
    """The 14-digit ids earlier advisors wrote overflowed PostgreSQL's INTEGER; BIGINT holds them."""
    from tests.unit.test_store_experiments import check_legacy_experiment_numbers_fit

    check_legacy_experiment_numbers_fit(pg_url)


def test_failed_and_interrupted_on_postgres(pg_url):
    from tests.unit.test_store_experiments import check_failed_and_interrupted

    check_failed_and_interrupted(pg_url)


def test_job_slots_run_once_on_postgres(pg_url):
    from tests.unit.test_store_experiments import check_job_slots_run_once

    check_job_slots_run_once(pg_url)
