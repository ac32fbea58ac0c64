"""A snapshot says what was wrong with what it read: the same series twice in one /metrics, a
histogram that contradicts itself, counters that went backwards between the engine probe's scrapes
(a reset, counted from zero), and series that a Prometheus answer holds twice. Each is a note in the
snapshot's problems, and the notes reach the text, markdown and JSON reports. Real captures of a
healthy engine raise none."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from probes import ProbeError, _delta, _primitives, probe_engine, probe_prometheus
from probes.catalog import dialects
from probes.exposition import parse
from tests.support.cli import run_cli
from tests.support.servers import fake_server
from tests.unit.test_promql import NAMES, fake, row, table  # noqa: F401  (fake is a fixture)

VLLM = dialects()["vllm"]
FIXTURES = Path(__file__).parent.parent / "fixtures" / "vllm-0.32.0-cpu"
WAITING = 'vllm:num_requests_waiting{engine="0",model_name="tiny-llama"}'


def text(stem: str) -> str:
    return (FIXTURES / f"{stem}.txt").read_text()


def engine(metrics: list[str]):
    calls = iter(range(10**6))

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(200, text=metrics[min(next(calls), len(metrics) - 1)])
        return httpx.Response(404)

    return probe_engine("http://engine.test", window_s=len(metrics) - 1, transport=httpx.MockTransport(handler),
                        sleep=lambda s: None)


@pytest.mark.parametrize("stem", ["metrics-idle-cold", "metrics-queueing-t0", "metrics-queueing-t1",
                                  "metrics-prefix-t1", "metrics-after-restart", "metrics-idle-after-load"])
def test_real_captures_raise_no_note(stem):
    assert parse(text(stem)).problems == []


def test_probe_over_real_captures_has_no_note():
    assert engine([text("metrics-queueing-t0"), text("metrics-queueing-t1")]).problems == []


# --- one scrape that contradicts itself ------------------------------------------------------------

def test_duplicate_series_is_noted_and_the_first_value_kept():
    s = parse(text("metrics-queueing-t1") + f"{WAITING} 99.0\n")
    assert s.series("vllm:num_requests_waiting")[(("engine", "0"), ("model_name", "tiny-llama"))] == 6.0
    assert len(s.problems) == 1
    assert "same series more than once" in s.problems[0] and "vllm:num_requests_waiting{" in s.problems[0]


HIST = "# TYPE h histogram\n"


@pytest.mark.parametrize("body, says", [
    ('h_bucket{le="1"} 5\nh_bucket{le="+Inf"} 3\nh_count 3\nh_sum 1\n', "go down as le grows"),
    ('h_bucket{le="1"} 1\nh_bucket{le="+Inf"} 3\nh_count 4\nh_sum 1\n', "_count differs from the +Inf bucket"),
    ('h_bucket{le="1"} 1\nh_bucket{le="2"} 3\nh_count 3\nh_sum 1\n', "no +Inf bucket"),
    ('h_bucket{le="soon"} 1\nh_bucket{le="+Inf"} 3\nh_count 3\nh_sum 1\n', "without a readable le"),
])
def test_inconsistent_histogram_is_noted(body, says):
    problems = parse(HIST + body).problems
    assert len(problems) == 1 and says in problems[0] and "inconsistent histogram" in problems[0]


def test_consistent_histogram_is_not_noted():
    assert parse(HIST + 'h_bucket{le="1"} 1\nh_bucket{le="+Inf"} 3\nh_count 3\nh_sum 1\n').problems == []


# --- scrapes that disagree with each other: a counter reset ----------------------------------------

def test_restart_between_scrapes_is_a_noted_reset():
    before, after = text("metrics-prefix-t1"), text("metrics-after-restart")
    snap = engine([before, after])
    resets = [p for p in snap.problems if "went backwards" in p]
    assert len(resets) == 1 and "vllm:" in resets[0] and "counted from zero" in resets[0]
    # The rate counts from zero after the reset: never negative.
    assert snap.signals["generation_tokens_per_s"].value >= 0
    after_total = sum(parse(after).series("vllm:generation_tokens_total").values())
    assert snap.signals["generation_tokens_per_s"].value == pytest.approx(after_total / snap.window_s)


def test_reset_inside_the_window_keeps_the_increase_before_it():
    # Loaded, more loaded, then restarted: the increase before the restart still counts, which
    # comparing the first scrape with the last alone would lose.
    t0, t1, cold = (parse(text(s), t) for s, t in (("metrics-queueing-t0", 0.0), ("metrics-queueing-t1", 10.0),
                                                     ("metrics-idle-cold", 20.0)))
    name = "vllm:generation_tokens_total"
    total = lambda s: sum(s.series(name).values())  # noqa: E731
    sig = _delta.compute(VLLM, [t0, t1, cold])[()]
    expected = (total(t1) - total(t0) + total(cold)) / 20.0
    assert sig["generation_tokens_per_s"].value == pytest.approx(expected) and expected > 0
    notes = _delta.notes([t0, t1, cold])
    assert len(notes) == 1 and "at scrape 3 of 3" in notes[0]


def test_a_counter_that_only_grows_is_not_noted():
    assert _delta.resets([parse(text("metrics-queueing-t0")), parse(text("metrics-queueing-t1"))]) == []


def test_gauges_going_down_are_not_resets():
    a = parse("# TYPE g gauge\ng 5\n")
    b = parse("# TYPE g gauge\ng 1\n")
    assert _delta.resets([a, b]) == []


def test_the_same_problem_in_every_scrape_is_noted_once():
    dup = text("metrics-queueing-t1") + f"{WAITING} 99.0\n"
    snap = engine([dup, dup, dup])
    assert sum("same series more than once" in p for p in snap.problems) == 1


# --- Prometheus answers ----------------------------------------------------------------------------

def test_duplicate_series_in_an_answer_is_noted_and_the_first_kept():
    rows, notes = _primitives.checked_rows([row(1, pod="a"), row(2, pod="a"), row(3, pod="b")], "http://p", "up")
    assert [r["value"][1] for r in rows] == ["1", "3"]
    assert len(notes) == 1 and "same series more than once" in notes[0] and 'pod="a"' in notes[0]


def test_empty_labels_are_absent_labels_when_matching_series():
    rows, notes = _primitives.checked_rows([row(1, pod=""), row(2)], "http://p", "up")
    assert len(rows) == 1 and notes


@pytest.mark.parametrize("result", [None, {"a": 1}, "vector", [1], [{"metric": {"pod": 5}, "value": [0, "1"]}],
                                    [{"metric": {}, "value": [0, 1]}], [{"metric": {}, "value": [0, "x"]}],
                                    [{"metric": {}}], [{"metric": [], "value": [0, "1"]}]])
def test_an_answer_that_is_not_a_vector_is_a_probe_error(result):
    with pytest.raises(ProbeError, match="does not answer like a Prometheus server"):
        _primitives.checked_rows(result, "http://p", "up")


def test_prometheus_probe_notes_duplicate_series(fake):  # noqa: F811
    t = table()
    key = "sum (rate(vllm:e2e_request_latency_seconds_count[60s]))"
    t[key] = [row(3), row(30)]
    snap = probe_prometheus(fake(NAMES, t).url, window_s=60, per_replica=False)
    assert snap.signals["request_rate"].value == 3
    assert any("same series more than once" in p for p in snap.problems), snap.problems


# --- the notes in every report ---------------------------------------------------------------------

def test_cli_reports_show_duplicate_and_reset_notes(tmp_path):
    files = []
    for name, body in (("t1", text("metrics-queueing-t1") + f"{WAITING} 99.0\n"), ("cold", text("metrics-idle-cold"))):
        (tmp_path / name).write_text(body)
        files += ["--metrics", str(tmp_path / name)]
    with fake_server(*files) as url:
        probe_text = run_cli("probe", "--url", url, "--window", "1s", data_dir=tmp_path)
        probe_json = run_cli("probe", "--url", url, "--window", "1s", "-o", "json", data_dir=tmp_path)
        md = run_cli("diagnose", "--url", url, "--window", "1s", "-o", "markdown", data_dir=tmp_path)
        diag_json = run_cli("diagnose", "--url", url, "--window", "1s", "-o", "json", data_dir=tmp_path)
    for r in (probe_text, probe_json, md, diag_json):
        assert r.code in (0, 1) and "Traceback" not in r.stderr, r.stderr
    flat = " ".join(probe_text.stdout.split())
    assert "note: /metrics lists the same series more than once" in flat
    assert "counter series went backwards between scrapes" in flat
    assert "> note: /metrics lists the same series more than once" in md.stdout
    assert "> note:" in md.stdout and "went backwards" in md.stdout
    for r in (probe_json, diag_json):
        problems = json.loads(r.stdout)["problems"]
        assert any("same series more than once" in p for p in problems)
        assert any("went backwards" in p for p in problems)
