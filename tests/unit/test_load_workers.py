"""One arrival process over several load worker processes, against a fake streaming server (a real
process on loopback): the sends keep the planned inter-arrival distribution, every record comes back
in the planned order, and a worker killed mid-run is reported with nothing it measured lost."""

import os
import signal
import threading
import time

import numpy as np
from scipy import stats
from typer.testing import CliRunner

from advisor.cli import app
from advisor.loadgen.metrics import summarize
from advisor.loadgen.runner import Target
from advisor.loadgen.workers import run_workers
from advisor.workload.plan import plan
from advisor.workload.spec import Workload
from tests.support.servers import fake_server

RATE = 40.0


def poisson(n: int, rate: float = RATE, seed: int = 3) -> Workload:
    return Workload.model_validate({"buckets": [{"prompt_tokens": 10, "output_tokens": 4}], "seed": seed,
                                    "arrival": {"kind": "poisson", "rate": rate}, "requests": n})


def test_two_workers_keep_one_poisson_arrival_process():
    w = poisson(400)
    reqs = plan(w)
    with fake_server("--delay", "0.001", "--tokens", "4") as url:
        r = run_workers(Target(url, "fake"), reqs, {q.index: "hi" for q in reqs}, workers=2)
    assert [x.index for x in r.records] == [q.index for q in reqs], "records come back in the planned order"
    assert all(x.status == "ok" for x in r.records) and r.aborted is None
    sends = np.sort([x.sent_s for x in r.records])
    gaps = np.diff(sends)
    # the same test as one worker's planned gaps (tests/unit/test_workload.py): exponential at the rate
    assert stats.kstest(gaps, "expon", args=(0, 1 / RATE)).pvalue > 0.01
    lag = np.array([x.sent_s - x.scheduled_s for x in r.records])
    assert np.median(lag) < 0.02, "both workers send against the one origin"
    s = summarize(r)
    assert s.generator.planned_rate is not None and s.overall.ok == 400


def test_closed_loop_splits_the_slots():
    w = Workload.model_validate({"buckets": [{"prompt_tokens": 10, "output_tokens": 4}],
                                 "arrival": {"kind": "concurrency", "concurrency": 4}, "requests": 40})
    reqs = plan(w)
    with fake_server("--delay", "0.002", "--tokens", "4") as url:
        r = run_workers(Target(url, "fake"), reqs, {q.index: "hi" for q in reqs}, workers=2, concurrency=4)
    assert sum(x.status == "ok" for x in r.records) == 40 and r.planned_span_s is None


def test_a_killed_worker_is_reported_and_nothing_measured_is_lost():
    w = poisson(240, rate=30.0)
    reqs = plan(w)
    seen: list = []

    def progress(done, total):
        seen.append(done)

    def kill_one():
        # once a few records have come back, SIGKILL the first worker process
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(seen) < 40:
            time.sleep(0.05)
        for p in __import__("multiprocessing").active_children():
            if p.name == "advisor-load-1":
                os.kill(p.pid, signal.SIGKILL)
                return

    with fake_server("--delay", "0.005", "--tokens", "4") as url:
        killer = threading.Thread(target=kill_one)
        killer.start()
        r = run_workers(Target(url, "fake"), reqs, {q.index: "hi" for q in reqs}, workers=2, progress=progress)
        killer.join()
    assert r.aborted and "load worker 1 died (killed by signal 9)" in r.aborted, r.aborted
    by_worker = [r.records[i::2] for i in range(2)]
    assert all(x.status == "ok" for x in by_worker[1]), "the surviving worker's requests all ran"
    dead = by_worker[0]
    ok = [x for x in dead if x.status == "ok"]
    assert len(ok) >= 10, "what the dead worker measured before it died is kept"
    assert all(x.ttft is not None for x in ok)
    assert any(x.status == "not_sent" for x in dead), "its later requests are not sent"
    assert all(x.error.startswith("load worker 1 died") for x in dead if x.status == "error")
    assert max(seen) == sum(x.status == "ok" for x in r.records)


def test_load_command_with_workers(tmp_path):
    w = tmp_path / "w.yaml"
    w.write_text("buckets: [{prompt_tokens: 10, output_tokens: 4}]\narrival: {kind: poisson, rate: 40}\n"
                 "requests: 80\nseed: 1\n")
    runner = CliRunner()
    with fake_server("--delay", "0.001", "--tokens", "4") as url:
        r = runner.invoke(app, ["load", "--target", url, "--model", "fake", "--workload", str(w), "--workers", "2",
                                "--output", "json"])
    assert r.exit_code in (0, 1), r.output
    import json

    out = json.loads(r.stdout)
    assert out["manifest"]["load_workers"] == 2 and out["overall"]["ok"] == 80
