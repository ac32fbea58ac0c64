"""The load generator against a fake streaming server (a real process on loopback): timing records,
and every bad answer recorded, counted, and nothing already measured lost."""

import asyncio

import pytest

from advisor.loadgen.metrics import MAX_LAG_P99_S, MIN_ACHIEVED_RATIO, summarize
from advisor.loadgen.runner import Target, run
from advisor.workload.plan import plan
from advisor.workload.spec import Workload
from tests.support.servers import fake_server, free_port


def workload(**kw) -> Workload:
    spec = {"buckets": [{"prompt_tokens": 10, "output_tokens": 8}], "arrival": {"kind": "constant", "rate": 50},
            "requests": 20, **kw}
    return Workload.model_validate(spec)


def go(url, w, **kw):
    reqs = plan(w)
    prompts = {r.index: "hello world" for r in reqs}
    return asyncio.run(run(Target(url, "fake"), reqs, prompts, **kw))


def test_records_every_chunk_and_metrics():
    with fake_server("--delay", "0.003") as url:
        r = go(url, workload())
    s = summarize(r)
    assert s.overall.ok == 20 and s.overall.errors == 0
    rec = r.records[0]
    assert rec.output_tokens == 8 and len(rec.chunk_s) == 8
    assert rec.ttft > 0 and rec.tpot > 0 and rec.e2e >= rec.ttft
    g = s.generator
    assert g.planned_rate == pytest.approx(50, rel=0.01) and g.lag_p50_s is not None
    # Validity depends on how busy this machine is; that it follows its stated rule does not.
    assert g.valid == (g.lag_p99_s <= MAX_LAG_P99_S and g.achieved_ratio >= MIN_ACHIEVED_RATIO)


def test_http_errors_mid_run_are_counted_and_earlier_results_kept():
    with fake_server("--fail-after", "5", "--status", "503") as url:
        r = go(url, workload())
    s = summarize(r)
    assert s.overall.ok == 5 and s.overall.errors == 15
    assert all(x.error.startswith("HTTP 503") for x in r.records if x.status == "error")
    assert s.errors_seen == {"HTTP 503": 15}


def test_stream_cut_mid_response_is_an_error():
    with fake_server("--cut-after", "3", "--tokens", "16") as url:
        r = go(url, workload())
    cut = [x for x in r.records if x.status == "error"]
    assert len(cut) == 17 and r.records[0].status == "ok"
    assert all(x.chunk_s for x in cut), "tokens received before the cut are kept"
    assert all("timed out" not in x.error for x in cut), "a cut is seen at once, not at the timeout"


def test_unreachable_target_every_request_an_error():
    r = go(f"http://127.0.0.1:{free_port()}", workload(requests=5))
    s = summarize(r)
    assert s.overall.errors == 5 and s.overall.ok == 0
    assert "ConnectError" in next(iter(s.errors_seen))


def test_cancellation_closes_the_stream_after_k_tokens():
    w = workload(cancellation={"rate": 1.0, "after_tokens": [2, 2]})
    with fake_server("--tokens", "32", "--delay", "0.002") as url:
        r = go(url, w)
    assert all(x.status == "cancelled" and len(x.chunk_s) == 2 for x in r.records)


def test_closed_loop_keeps_concurrency():
    w = Workload.model_validate({"buckets": [{"prompt_tokens": 10, "output_tokens": 4}],
                                 "arrival": {"kind": "concurrency", "concurrency": 3}, "requests": 12})
    with fake_server() as url:
        r = go(url, w, concurrency=3)
    assert sum(x.status == "ok" for x in r.records) == 12


def test_warmup_is_excluded():
    with fake_server() as url:
        r = go(url, workload(requests=40))
    s = summarize(r, warmup_s=0.4)
    assert s.overall.requests == sum(1 for x in r.records if x.scheduled_s >= 0.4) < 40


def test_a_generator_that_falls_behind_is_invalid_and_says_why():
    from advisor.loadgen.record import RequestRecord
    from advisor.loadgen.runner import Run

    recs = [RequestRecord(i, "b", 10, 8, scheduled_s=i * 0.01, sent_s=i * 0.01 + 0.2, status="ok") for i in range(50)]
    s = summarize(Run(records=recs, started_at=0, wall_s=1, planned_span_s=0.49))
    assert not s.generator.valid and "scheduling lag p99 200 ms" in s.generator.why_invalid


def test_run_load_returns_the_result_and_leaves_the_collector_as_it_was():
    import gc

    from advisor.loadgen.loop import run_load

    async def answer():
        assert gc.get_freeze_count() > 0, "the heap from before the run is frozen during it"
        return 42

    async def boom():
        raise RuntimeError("mid-run")

    assert run_load(answer()) == 42
    assert gc.get_freeze_count() == 0
    with pytest.raises(RuntimeError, match="mid-run"):
        run_load(boom())
    assert gc.get_freeze_count() == 0


def test_requests_spread_over_replicas_go_to_the_one_with_fewest_in_flight():
    """An arm of two replicas, one twenty times slower: each request goes to the replica with the
    fewest in flight, so both serve and the fast one serves most; the record says which served it."""
    w = Workload.model_validate({"buckets": [{"prompt_tokens": 10, "output_tokens": 8}],
                                 "arrival": {"kind": "concurrency", "concurrency": 2}, "requests": 30})
    reqs = plan(w)
    prompts = {r.index: "hello world" for r in reqs}
    with fake_server("--delay", "0.001") as fast, fake_server("--delay", "0.02") as slow:
        r = asyncio.run(run(Target(fast, "fake", spread=(slow,)), reqs, prompts, concurrency=2))
    assert all(x.status == "ok" for x in r.records)
    served = [x.replica for x in r.records]
    assert set(served) == {0, 1} and served.count(0) > 3 * served.count(1), served


def test_one_replica_records_none():
    with fake_server() as url:
        r = go(url, workload(requests=3))
    assert [x.replica for x in r.records] == [None, None, None]


def test_an_interrupt_before_the_loop_runs_leaves_no_never_awaited_warning(monkeypatch):
    """Ctrl-C while the event loop starts: the user's terminal gets no RuntimeWarning about the load's
    coroutine (seen when an experiment was interrupted during its warmup)."""
    import gc
    import warnings

    from advisor.loadgen import loop

    async def load():
        return 1

    def interrupted(coro):
        raise KeyboardInterrupt

    monkeypatch.setattr(loop, "_run", interrupted)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(KeyboardInterrupt):
            loop.run_load(load())
        gc.collect()
    assert not [w for w in seen if "never awaited" in str(w.message)], [str(w.message) for w in seen]
    monkeypatch.undo()
    assert loop.run_load(load()) == 1
