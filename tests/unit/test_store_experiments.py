"""Experiments and scheduled job runs in the store. Each check takes a database URL: SQLite here,
PostgreSQL in tests/integration/test_store_postgres.py, with the same assertions."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text

from advisor.experiments.result import BlockRecord, ExperimentResult, Look, MetricResult
from advisor.store import StoreError, open_store
from tests.unit.test_store import make_diagnosis
from tests.unit.test_store_load_runs import STARTED, make_records, make_summary, make_workload

# An experiment id as the advisor makes them, and the 14-digit number earlier advisors stored for it.
KEY = "exp-20261201-133547"
LEGACY_NUMBER = 20261201133547


def make_result(key: str = KEY, verdict: str = "improved") -> ExperimentResult:
    metric = MetricResult(metric="ttft", statistic="p50", lower_is_better=True, baseline_value=2.0,
                          candidate_value=0.5, ratio=0.25, ci=(0.18, 0.32), level=0.95, p_value=0.001,
                          adjusted_p=0.001, verdict=verdict, method="HL", n_blocks=(3, 3), n_samples=(96, 96),
                          margin=0.05, reason="<script>alert(1)</script> from a label")
    return ExperimentResult(
        id=key, deployment="local", mechanism="max_num_seqs", value="8", status="finished", verdict=verdict,
        primary_metric="ttft_p50", ratio=0.25, ci=(0.18, 0.32), reason="clear", metrics=[metric],
        blocks=[BlockRecord(arm=arm, block=b, requests=32, ok=32, errors=0, ttft_p50=2.0 if arm == "baseline" else .5,
                            tpot_p50=0.05, e2e_p95=3.0, generator_valid=True)
                for b in range(3) for arm in ("baseline", "candidate")],
        looks=[Look(blocks=3, alpha=0.05, verdict=verdict, ratio=0.25, ci=(0.18, 0.32), requests=192)],
        stop_reason="decisive at look 1", baseline_restored=True, manifest={"experiment": key, "nan": float("nan")})


def check_experiment_round_trip(url: str) -> None:
    with open_store(url) as store:
        diag = store.save_diagnosis(make_diagnosis(), deployment="local")
        ident = store.start_experiment(KEY, "local", "http://user:secret@127.0.0.1:8000", "max_num_seqs", "8",
                                       {"lines": ["design"], "blocks_per_arm": 3})
        running = store.get_experiment(ident)
        assert running.summary.status == "running" and running.result_document is None
        assert "secret" not in running.summary.target, "no credentials stored"
        assert running.design["blocks_per_arm"] == 3
        # Its blocks land while it runs, carrying its id.
        run = store.save_load_run(make_workload(), make_summary(make_records(4)), make_records(4), target="http://127.0.0.1:8000",
                                  model="m", started_at=STARTED, wall_s=1.0, experiment_id=ident, arm="baseline",
                                  block=0)
        assert [r.id for r in store.list_load_runs(experiment_id=ident)] == [run]
        store.finish_experiment(ident, make_result())
        done = store.get_experiment(ident)
        assert (done.summary.status, done.summary.verdict, done.summary.ratio) == ("finished", "improved", 0.25)
        back = ExperimentResult.model_validate(done.result_document)
        assert back.metrics[0].ci == (0.18, 0.32) and back.judgement == make_result().judgement
        assert back.manifest["nan"] is None
        assert store.link_experiments(diag, "local", [KEY]) == 1
        assert [e.id for e in store.list_experiments(diagnosis_id=diag)] == [ident]
        assert [e.key for e in store.list_experiments(deployment="local")] == [KEY]
        assert store.list_experiments(deployment="other") == []
        # The same key on another deployment is another experiment; on the same one it is refused.
        store.start_experiment(KEY, "other", "http://x:1", "max_num_seqs", "8", {})
        with pytest.raises(StoreError):
            store.start_experiment(KEY, "local", "http://x:1", "max_num_seqs", "8", {})
        with pytest.raises(StoreError, match="no experiment 999"):
            store.get_experiment(999)


def check_legacy_experiment_numbers_fit(url: str) -> None:
    """Earlier advisors stored the id's 14 digits in load_runs.experiment_id: beyond 32 bits."""
    with open_store(url) as store:
        run = store.save_load_run(make_workload(), make_summary(make_records(2)), make_records(2), target="http://h:1", model="m",
                                  started_at=STARTED, wall_s=1.0, experiment_id=LEGACY_NUMBER, arm="candidate",
                                  block=1)
        [row] = store.list_load_runs(experiment_id=LEGACY_NUMBER)
        assert (row.id, row.experiment_id) == (run, LEGACY_NUMBER)


def check_failed_and_interrupted(url: str) -> None:
    with open_store(url) as store:
        a = store.start_experiment("exp-a", "local", "http://h:1", "prefix_caching", "True", {})
        store.fail_experiment(a, "LauncherError: candidate never became healthy")
        b = store.start_experiment("exp-b", "local", "http://h:1", "max_num_seqs", "8", {})
        store.finish_experiment(b, make_result("exp-b", "inconclusive"), status="interrupted")
        assert store.get_experiment(a).summary.status == "failed" and store.get_experiment(a).result_document is None
        assert store.get_experiment(b).summary.status == "interrupted"
        assert ExperimentResult.model_validate(store.get_experiment(b).result_document).verdict == "inconclusive"


def check_job_slots_run_once(url: str) -> None:
    with open_store(url) as one, open_store(url) as two:
        first = one.claim_job("diagnose:local", "2026-12-01T13:45", owner="a")
        assert first is not None
        assert two.claim_job("diagnose:local", "2026-12-01T13:45", owner="b") is None, "a second advisor skips it"
        assert two.claim_job("diagnose:local", "2026-12-01T14:00", owner="b") is not None
        one.finish_job(first, ok=False, detail="Prometheus down")
        runs = two.list_job_runs("diagnose:local")
        assert [(r.slot, r.ok) for r in runs] == [("2026-12-01T14:00", None), ("2026-12-01T13:45", False)]


@pytest.fixture
def url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'advisor.db'}"


def test_experiment_round_trip(url):
    check_experiment_round_trip(url)


def test_legacy_experiment_numbers_fit(url):
    check_legacy_experiment_numbers_fit(url)


def test_failed_and_interrupted(url):
    check_failed_and_interrupted(url)


def test_job_slots_run_once(url):
    check_job_slots_run_once(url)


def test_upgrade_from_0002_keeps_every_sample(tmp_path):
    """0003 on a SQLite database in use: no table rebuild may cascade-delete load runs' samples."""
    from alembic import command
    from alembic.config import Config

    from advisor.store.connect import MIGRATIONS

    url2 = f"sqlite:///{tmp_path / 'seq.db'}"
    engine = create_engine(url2)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        conn.execute(text("PRAGMA foreign_keys=ON"))
        config.attributes["connection"] = conn
        command.upgrade(config, "0002")
        conn.execute(text(
            "INSERT INTO load_runs (id, created_at, target, model, workload_name, source, valid, requests, ok, "
            "errors, wall_s, started_at, workload, summary, experiment_id) VALUES (1, '2026-01-01', 't', 'm', 'w', "
            f"'s', 1, 1, 1, 0, 1.0, '2026-01-01', '{{}}', '{{}}', {LEGACY_NUMBER})"))
        conn.execute(text("INSERT INTO request_samples (run_id, \"index\", bucket, status, prompt_tokens, "
                          "max_tokens, output_tokens, chunks) VALUES (1, 0, 'b', 'ok', 1, 1, 1, 1)"))
    engine.dispose()
    open_store(url2).close()  # upgrades to head, foreign keys on as the store always has them
    engine = create_engine(url2)
    with engine.connect() as conn:
        assert conn.scalar(text("SELECT count(*) FROM request_samples")) == 1
        assert conn.scalar(text("SELECT experiment_id FROM load_runs")) == LEGACY_NUMBER
        assert conn.scalar(text("SELECT version_num FROM advisor_alembic_version")) == "0004"
    engine.dispose()
