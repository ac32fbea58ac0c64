"""Server readouts of an experiment's blocks, read from real vLLM captures served in turn: the
signals, the requests the engine counted against those sent (outside traffic), an arm without
/metrics, the per-arm medians and the notes a report shows."""

from __future__ import annotations

import httpx
import pytest

from advisor.experiments.arms import engine_readouts
from advisor.experiments.result import BlockRecord, ServerReadout
from tests.unit.test_snapshot_honesty import text

WATCH = ("requests_running_avg", "kv_cache_usage_max")


def transport(stems: list[str], status: int = 200) -> httpx.MockTransport:
    calls = iter(range(10**6))

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path != "/metrics" or status != 200:
            return httpx.Response(404 if request.url.path != "/metrics" else status)
        return httpx.Response(200, text=text(stems[min(next(calls), len(stems) - 1)]))

    return httpx.MockTransport(handler)


def watch_block(stems, sent, status=200, model="tiny-llama") -> ServerReadout:
    w = engine_readouts.BlockWatch("http://engine.test", "vllm", model, WATCH, every_s=60,
                                   transport=transport(stems, status))
    return w.readout(sent)


def test_a_block_between_two_captures_reads_the_engines_signals_and_counts_its_requests():
    r = watch_block(["metrics-queueing-t0", "metrics-queueing-t1"], sent=34)
    assert r.note is None and r.window_s is not None
    assert r.requests_counted == 34  # 52 - 18 finished between the captures
    assert r.outside_requests == 0
    # No scrape inside the window: the gauges are not read from the brackets, which a block takes
    # idle (a block shorter than the scrape interval would read "nothing running").
    assert r.signals["requests_running_avg"] is None and r.signals["kv_cache_usage_max"] is None
    assert r.signals["queue_time_p95"] is not None and r.signals["queue_time_p95"] > 0
    assert set(engine_readouts.ALWAYS) | set(WATCH) == set(r.signals)


def test_gauges_come_from_the_scrapes_taken_while_the_load_ran():
    """Idle before the block, scrapes with two requests running, idle after it: the block ran two at
    a time (with the idle brackets the average would be lower); its counters span the brackets."""
    import threading
    import time

    bracket = iter(["metrics-idle-cold", "metrics-idle-after-load"])
    during = []

    def handler(request: httpx.Request) -> httpx.Response:
        # The caller's thread takes the brackets (start and stop); the watch's own thread the rest.
        if threading.current_thread() is threading.main_thread():
            return httpx.Response(200, text=text(next(bracket)))
        during.append(1)
        return httpx.Response(200, text=text("metrics-queueing-t1"))

    w = engine_readouts.BlockWatch("http://engine.test", "vllm", "tiny-llama", WATCH, every_s=0.02,
                                   transport=httpx.MockTransport(handler))
    deadline = time.monotonic() + 10
    while len(during) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    r = w.readout(60)
    assert r.signals["requests_running_avg"] == pytest.approx(2.0)
    assert r.requests_counted == 60 and r.outside_requests == 0


def test_requests_the_advisor_did_not_send_are_outside_traffic():
    r = watch_block(["metrics-queueing-t0", "metrics-queueing-t1"], sent=10)
    assert r.requests_counted == 34 and r.outside_requests == 24


def test_another_models_series_are_not_this_arms():
    r = watch_block(["metrics-queueing-t0", "metrics-queueing-t1"], sent=34, model="other-model")
    assert r.signals["queue_time_p95"] is None and r.requests_counted in (None, 0)


@pytest.mark.parametrize("status", [404, 401, 500])
def test_an_engine_without_readable_metrics_keeps_the_block_and_says_why(status):
    r = watch_block(["metrics-queueing-t0"], sent=5, status=status)
    assert r.signals == {} and r.requests_counted is None
    assert r.note.startswith("no server readouts:") and f"{status}" in r.note


def test_an_unreachable_engine_is_a_note_not_an_error():
    w = engine_readouts.BlockWatch("http://127.0.0.1:9", "vllm", "m", every_s=60)
    assert "no server readouts" in w.readout(3).note


def block(arm, i, signals, outside=0, valid=True):
    return BlockRecord(arm=arm, block=i, requests=8, ok=8, errors=0, ttft_p50=0.1, tpot_p50=0.01, e2e_p95=0.5,
                       generator_valid=valid,
                       server=ServerReadout(signals=signals, window_s=5, requests_counted=8 + outside,
                                            outside_requests=outside))


def test_per_arm_medians_watched_first_and_invalid_blocks_left_out():
    blocks = [block("baseline", 0, {"requests_waiting_avg": 4.0, "requests_running_avg": 2.0}),
              block("candidate", 0, {"requests_waiting_avg": 0.0, "requests_running_avg": 6.0}),
              block("candidate", 1, {"requests_waiting_avg": 1.0, "requests_running_avg": 8.0}),
              block("baseline", 1, {"requests_waiting_avg": 6.0, "requests_running_avg": 2.0}),
              block("baseline", 2, {"requests_waiting_avg": 99.0, "requests_running_avg": 99.0}, valid=False)]
    rows = engine_readouts.per_arm(blocks, ("requests_running_avg",))
    assert [r.signal for r in rows] == ["requests_running_avg", "requests_waiting_avg"]
    assert (rows[0].baseline, rows[0].candidate, rows[0].watched) == (2.0, 7.0, True)
    assert (rows[1].baseline, rows[1].candidate, rows[1].watched) == (5.0, 0.5, False)


def test_notes_name_outside_traffic_blind_arms_and_what_the_watched_signals_did():
    blocks = [block("baseline", 0, {"requests_running_avg": 2.0}, outside=40),
              block("candidate", 0, {"requests_running_avg": 2.0}),
              BlockRecord(arm="candidate", block=1, requests=8, ok=8, errors=0, ttft_p50=0.1, tpot_p50=0.01,
                          e2e_p95=0.5, generator_valid=True, server=ServerReadout(note="no server readouts: 404")),
              block("baseline", 1, {"requests_running_avg": 2.0}, outside=1)]
    rows = engine_readouts.per_arm(blocks, ("requests_running_avg",))
    notes = engine_readouts.notes(blocks, rows, "no change")
    assert any(n.startswith("outside traffic: the baseline's engine finished 40 requests") and "block 1;" in n
               for n in notes), notes
    assert any("1 of 2 candidate blocks have no server readouts (no server readouts: 404)" in n for n in notes)
    assert "watched signals, baseline -> candidate: requests_running_avg 2 -> 2" in notes
    assert not any(n.startswith("watched") for n in engine_readouts.notes(blocks, rows, "improved"))


def test_an_engine_answering_oddly_costs_the_readouts_not_the_block():
    """/v1/models with data that is not a list, and a scrape thread whose fetches raise something
    other than a probe error: the block keeps going and says what it lost."""
    calls = {"n": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": 5})
        calls["n"] += 1
        if calls["n"] > 1 and request.url.path == "/metrics" and calls["n"] < 4:
            raise RuntimeError("connection pool closed")
        return httpx.Response(200, text=text("metrics-queueing-t1"))

    w = engine_readouts.BlockWatch("http://engine.test", "vllm", "tiny-llama", every_s=0.01,
                                   transport=httpx.MockTransport(handler), describe=True)
    assert w.arm_info is not None and w.arm_info["models"] == []
    import time

    time.sleep(0.1)
    r = w.readout(5)
    assert r.signals, r.note
    w.close()  # after a readout: nothing left to close


def test_a_failed_block_stops_its_watch():
    w = engine_readouts.BlockWatch("http://engine.test", "vllm", "tiny-llama", every_s=0.01,
                                   transport=transport(["metrics-queueing-t0", "metrics-queueing-t1"]))
    thread = w._watch._thread
    w.close()
    assert not thread.is_alive()
    assert w.readout(3).note is None and w.readout(3).signals == {}


def test_an_arm_of_replicas_adds_up_its_batch_and_queue_and_keeps_its_worst_tail():
    c = engine_readouts.combine
    assert c("requests_running_avg", [1.5, 2.0]) == 3.5 and c("requests_waiting_max", [3, 1]) == 4
    assert c("generation_tokens_per_s", [10.0, 30.0]) == 40.0
    assert c("kv_cache_usage_max", [0.2, 0.7]) == 0.7 and c("queue_time_p95", [0.1, 0.4]) == 0.4
    assert c("prefix_cache_hit_rate", [0.2, 0.4]) == pytest.approx(0.3)
    assert c("requests_running_avg", [1.0, None]) is None, "one replica unread: the arm's value is unknown"


def test_the_readouts_of_an_arm_of_replicas_count_every_replica_s_requests(monkeypatch):
    parts = iter([ServerReadout(signals={"requests_running_avg": 1.0}, window_s=4.0, requests_counted=6),
                  ServerReadout(signals={"requests_running_avg": 0.5}, window_s=5.0, requests_counted=7,
                                note="1 scrape(s) failed")])

    class One:
        def __init__(self, *a, **kw):
            self.arm_info = None

        def readout(self, sent):
            return next(parts)

    monkeypatch.setattr(engine_readouts, "BlockWatch", One)
    r = engine_readouts.ReplicasWatch(["http://a", "http://b"], "vllm", "m").readout(10)
    assert (r.signals, r.window_s, r.requests_counted, r.outside_requests) == ({"requests_running_avg": 1.5}, 5.0,
                                                                                13, 3)
    assert r.note == "replica 2: 1 scrape(s) failed"
