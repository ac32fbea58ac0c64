"""Every read is bounded: an input file that is a FIFO (or a device) is refused instead of blocking
forever; durations, windows and rates past their ceilings are refused before anything is sampled or
planned; the load schedule is drawn lazily; and the work on a target's answer grows linearly with
it, up to caps that end in one line naming the setting that raises them.

The command line runs in a subprocess with a timeout (tests/support/cli.py), so a read that blocks
fails its test instead of hanging the suite. Time bounds are generous (ten times what the code
takes here): they fail on the quadratic code they replace, not on a busy machine."""

from __future__ import annotations

import itertools
import os
import random
import socket
import time
import tracemalloc
from pathlib import Path

import httpx
import pytest


from advisor.inputs import InputError, open_input, read_bytes, text_lines
from advisor.units import MAX_LOAD_REQUESTS
from advisor.workload import plan as plan_mod
from advisor.workload.plan import plan, schedule
from advisor.workload.spec import Workload, WorkloadError, load_workload
from probes import _replicas
from probes.errors import BadExposition, ProbeError
from probes.exposition import parse
from probes.http import HttpConfig, TooLarge
from probes.snapshot import Signal
from tests.support.cli import assert_one_line_error, run_cli
from tests.unit.test_bad_inputs_cli import TRACE, WORKLOAD, closed_port  # the same small files

# A hang must fail the test, not stall the suite; a CLI start on a busy 2-core machine takes seconds.
CLI_TIMEOUT_S = 60

DEPLOYMENT = """\
name: test
engine: vllm
model: tiny
launcher: endpoints
endpoints: {baseline: "http://127.0.0.1:%(port)d", candidate: "http://127.0.0.1:%(port)d"}
"""
@pytest.fixture
def env(tmp_path):
    port = closed_port()

    class Env:
        url = f"http://127.0.0.1:{port}"

        @staticmethod
        def file(name: str, content: str) -> str:
            path = tmp_path / name
            path.write_text(content)
            return str(path)

        @staticmethod
        def fifo(name: str = "fifo.yaml") -> str:
            path = tmp_path / name
            os.mkfifo(path)
            return str(path)

        @staticmethod
        def deployment() -> str:
            return Env.file("dep.yaml", DEPLOYMENT % {"port": port})

        @staticmethod
        def run(*args: str, **kw):
            kw.setdefault("data_dir", tmp_path / "data")
            kw.setdefault("timeout", CLI_TIMEOUT_S)
            return run_cli(*args, **kw)

    return Env


# --- a FIFO named as an input file ------------------------------------------------------------------

FIFO_CASES = {
    "SLO": lambda e, f: ("diagnose", "--prom-url", e.url, "--slo", f),
    "SLO from the environment": lambda e, f: ("diagnose", "--prom-url", e.url),
    "rules config": lambda e, f: ("diagnose", "--prom-url", e.url, "--rules-config", f),
    "deployment": lambda e, f: ("experiment", "--deployment", f, "--mechanism", "max_num_seqs", "--value", "4",
                                "--dry-run"),
    "workload (load)": lambda e, f: ("load", "--target", e.url, "--workload", f),
    "workload (experiment)": lambda e, f: ("experiment", "--deployment", e.deployment(), "--mechanism",
                                           "max_num_seqs", "--value", "4", "--workload", f, "--dry-run"),
    "trace": lambda e, f: ("load", "--target", e.url, "--from-trace", f),
    "advisor.yaml": lambda e, f: ("report", "weekly", "--config", f, "--out", str(Path(f).with_name("r.md"))),
    "password file": lambda e, f: ("probe", "--prom-url", e.url),
    "CA bundle": lambda e, f: ("--ca-bundle", f, "probe", "--prom-url", e.url.replace("http:", "https:")),
}
FIFO_ENV = {
    "SLO from the environment": lambda f: {"ADVISOR_SLO_FILE": f},
    "password file": lambda f: {"ADVISOR_PROM_USER": "u", "ADVISOR_PROM_PASSWORD_FILE": f},
}


@pytest.mark.parametrize("kind", list(FIFO_CASES))
def test_a_fifo_named_as_an_input_file_is_refused_not_read(env, kind):
    fifo = env.fifo("input.jsonl" if kind == "trace" else "input.yaml")
    r = env.run(*FIFO_CASES[kind](env, fifo), env=FIFO_ENV.get(kind, lambda f: {})(fifo))
    line = assert_one_line_error(r, contains="not a regular file (a FIFO)")
    assert fifo in line or kind == "password file" and "ADVISOR_PROM_PASSWORD_FILE" in line
    assert "unreachable" not in r.stderr  # refused before any target was asked


def test_a_fifo_inside_a_model_folder_is_refused_not_read(env, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    os.mkfifo(folder / "model.safetensors")
    assert_one_line_error(env.run("model", "inspect", str(folder)), contains="not a regular file (a FIFO)")
    (folder / "model.safetensors").unlink()
    os.mkfifo(folder / "config.json")
    (folder / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    r = env.run("model", "inspect", str(folder))
    assert r.code == 2 and "Traceback" not in r.stderr, r.stderr  # whatever it says, it said it at once


def test_an_export_destination_that_is_a_fifo_is_refused_before_the_run(env):
    r = env.run("load", "--target", env.url, "--from-trace", env.file("t.jsonl", TRACE), "--export", env.fifo("r.jsonl"))
    assert_one_line_error(r, contains="not a regular file")


def test_open_input_names_what_the_path_is(tmp_path):
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(InputError, match=r"f: not a regular file \(a FIFO\)$"):
        read_bytes(fifo)
    with pytest.raises(InputError, match=r"not a regular file \(a FIFO\)"):
        next(text_lines(fifo))
    assert time.monotonic() - started < 5
    with pytest.raises(InputError, match="is a directory, not a file"):
        read_bytes(tmp_path)
    if Path("/dev/zero").exists():
        with pytest.raises(InputError, match=r"not a regular file \(a character device\)"):
            read_bytes(Path("/dev/zero"))
    sock_path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(sock_path))
        with pytest.raises(InputError, match=r"not a regular file \(a socket\)"):
            read_bytes(sock_path)
    big = tmp_path / "big.yaml"
    with open(big, "wb") as f:
        f.truncate(17 * 1024 * 1024)  # sparse: the size alone refuses it, nothing is read
    with pytest.raises(InputError, match="too large"):
        read_bytes(big)
    ok = tmp_path / "ok.yaml"
    ok.write_text("a: 1\n")
    with open_input(ok) as f:
        assert f.read() == b"a: 1\n"
    with pytest.raises(InputError, match="No such file"):
        read_bytes(tmp_path / "missing.yaml")


def test_a_trace_longer_than_one_load_is_refused_as_it_is_read(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(TRACE * 3)
    with pytest.raises(InputError, match="more than 5 lines"):
        list(text_lines(path, max_lines=5))
    assert len(list(text_lines(path, max_lines=6))) == 6


# --- ceilings on durations, windows and rates ------------------------------------------------------

OPTION_CASES = [
    (("probe", "--url", "{url}", "--window", "99999d"), "--window 99999d is above the ceiling of 24h"),
    (("probe", "--prom-url", "{url}", "--window", "99999d"), "--window 99999d is above the ceiling of 366d"),
    (("diagnose", "--url", "{url}", "--window", "2d"), "--window 48h is above the ceiling of 24h"),
    (("load", "--target", "{url}", "--from-trace", "{trace}", "--duration", "99999d"), "above the ceiling"),
    (("load", "--target", "{url}", "--from-trace", "{trace}", "--duration", "25h"),
     "--duration 25h is above the ceiling of 24h"),
    (("load", "--target", "{url}", "--from-trace", "{trace}", "--rate", "1e308"), "--rate"),
    (("load", "--target", "{url}", "--from-trace", "{trace}", "--rate", "20000"),
     "--rate 20,000 is above the ceiling of 10,000"),
    (("load", "--target", "{url}", "--from-trace", "{trace}", "--rate", "5000", "--duration", "1h"),
     "plans about 18,000,000 requests, above the ceiling of 1,000,000"),
    (("load", "--target", "{url}", "--from-trace", "{trace}", "--concurrency", "100000"),
     "--concurrency 100,000 is above the ceiling of 10,000"),
    (("load", "--target", "{url}", "--from-trace", "{trace}", "--warmup", "2d"), "--warmup 48h is above the ceiling"),
    (("load", "--target", "{url}", "--from-prom", "{url}", "--window", "99999d"), "--window 99999d is above"),
    (("experiment", "--deployment", "{dep}", "--mechanism", "max_num_seqs", "--value", "4", "--max-duration", "30d"),
     "--max-duration: the guardrail 30d is above the ceiling of 7d"),
    (("report", "weekly", "--out", "{out}", "--since", "60d"), "--since: the period 60d is above the ceiling of 31d"),
]


@pytest.mark.parametrize("argv, contains", OPTION_CASES, ids=[" ".join(a[:1] + a[-2:]) for a, _ in OPTION_CASES])
def test_options_past_their_ceiling_are_one_line_before_anything_starts(env, tmp_path, argv, contains):
    values = {"url": env.url, "trace": env.file("t.jsonl", TRACE), "dep": env.deployment(),
              "out": str(tmp_path / "r.md")}
    started = time.monotonic()
    r = env.run(*(a.format(**values) for a in argv))
    assert_one_line_error(r, contains=contains)
    assert "unreachable" not in r.stderr and "sampling" not in r.stderr
    assert time.monotonic() - started < CLI_TIMEOUT_S


FILE_CASES = [
    ("w.yaml", WORKLOAD.replace("requests: 8", "duration_s: 172800"),
     "field duration_s: 48h is above the ceiling of 24h (the longest load run) (line 3)"),
    ("w.yaml", WORKLOAD.replace("rate: 2", "rate: 50000"),
     "field arrival.rate: 50,000 is above the ceiling of 10,000 (requests per second one load sends) (line 2)"),
    ("w.yaml", WORKLOAD.replace("requests: 8", "requests: 5000000"), "field requests: 5,000,000 is above the ceiling of 1,000,000"),
    ("w.yaml", WORKLOAD.replace("rate: 2", "rate: 5000").replace("requests: 8", "duration_s: 3600"),
     "field arrival.rate: 5000 requests per second for 1h plans about 18,000,000 requests"),
    ("w.yaml", WORKLOAD.replace("{kind: poisson, rate: 2}", "{kind: concurrency, concurrency: 50000}"),
     "field arrival.concurrency: 50,000 is above the ceiling of 10,000"),
]


@pytest.mark.parametrize("name, content, contains", FILE_CASES, ids=[c[2][:40] for c in FILE_CASES])
def test_workload_files_past_a_ceiling_name_the_field_and_line(env, name, content, contains):
    path = env.file(name, content)
    assert_one_line_error(env.run("load", "--target", env.url, "--workload", path), contains=contains)
    with pytest.raises(WorkloadError, match=contains.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")):
        load_workload(Path(path))


@pytest.mark.parametrize("section, contains", [
    ("weekly_report: {since: 60d}\n", "field weekly_report.since: the period 60d is above the ceiling of 31d"),
    ("    experiments: {max_duration: 30d}\n", "experiments.max_duration: the guardrail 30d is above the ceiling of 7d"),
])
def test_advisor_yaml_past_a_ceiling_names_the_field(env, tmp_path, section, contains):
    text = f"deployments:\n  - name: a\n    prom_url: {env.url}\n" + section
    path = env.file("advisor.yaml", text)
    r = env.run("report", "weekly", "--config", path, "--out", str(tmp_path / "r.md"))
    assert_one_line_error(r, contains=contains)


def test_a_replayed_trace_longer_than_a_load_run_is_refused(env):
    trace = TRACE + '{"timestamp": 90000, "prompt_tokens": 16, "output_tokens": 4}\n'
    r = env.run("load", "--target", env.url, "--from-trace", env.file("t.jsonl", trace))
    assert_one_line_error(r, contains="the trace spans 25h, above the ceiling of 24h on one load run")


# --- the schedule is drawn lazily -----------------------------------------------------------------

def _workload(**kw) -> Workload:
    base = {"buckets": [{"prompt_tokens": [16, 64], "output_tokens": [4, 8]}],
            "arrival": {"kind": "poisson", "rate": 10}, "requests": 500, "seed": 3,
            "prefix": {"groups": 2, "tokens": 8, "share": 0.5}, "cancellation": {"rate": 0.2}}
    return Workload.model_validate({**base, **kw})


def test_the_schedule_is_an_iterator_whose_first_request_is_there_at_once():
    # A million requests a second for a year: 3e13 requests, which no list could hold.
    w = _workload(requests=None, duration_s=365 * 86400.0, arrival={"kind": "poisson", "rate": 1e6})
    rss = _rss()
    started = time.monotonic()
    it = schedule(w)
    first = next(it)
    assert time.monotonic() - started < 1.0
    for _ in itertools.islice(it, 200_000):
        pass
    assert first.index == 0 and first.at_s == 0.0
    assert _rss() - rss < 64 * 2**20, "memory grew while drawing 200,000 requests"
    tracemalloc.start()
    try:
        for _ in itertools.islice(it, 20_000):
            pass
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2**20, f"{peak / 2**20:.1f} MiB held while drawing 20,000 more"


def _rss() -> int:
    """This process's resident memory now, in bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_plan_refuses_a_schedule_past_the_ceiling_before_drawing_it():
    w = _workload(requests=None, duration_s=365 * 86400.0, arrival={"kind": "poisson", "rate": 1e6})
    started = time.monotonic()
    with pytest.raises(WorkloadError, match="above the ceiling"):
        plan(w)
    assert time.monotonic() - started < 1.0


def test_the_schedule_is_the_plan_drawn_one_at_a_time():
    for kw in ({}, {"arrival": {"kind": "gamma", "rate": 50, "burstiness": 0.5}},
               {"requests": None, "duration_s": 20.0}, {"arrival": {"kind": "concurrency", "concurrency": 4}}):
        w = _workload(**kw)
        assert list(schedule(w)) == plan(w)
        assert plan(w) == plan(w)  # deterministic for a seed


def test_a_closed_loop_plans_no_more_than_one_load_holds(monkeypatch):
    monkeypatch.setattr(plan_mod, "MAX_LOAD_REQUESTS", 1000)
    w = _workload(requests=None, duration_s=3600.0, arrival={"kind": "concurrency", "concurrency": 100})
    assert sum(1 for _ in schedule(w)) == 1000  # not 3600 x 100 x 20


def test_plan_holds_at_most_its_limit():
    with pytest.raises(WorkloadError, match="more than 100 requests"):
        plan(_workload(requests=None, duration_s=30.0), limit=100)
    assert MAX_LOAD_REQUESTS == 1_000_000


# --- work linear in the answer, and capped ---------------------------------------------------------

def _reference_fold(groups):
    """The fold as it was (quadratic), kept as the oracle for what a fold means."""
    from probes.snapshot import Replica

    keys = [k for k in groups if k]
    full = [k for k in keys if not any(set(k) < set(o) for o in keys)]
    out = {k: dict(groups[k]) for k in full}
    for k in keys:
        if k in out:
            continue
        owners = [f for f in full if set(k) < set(f)]
        if len(owners) == 1:
            for name, sig in groups[k].items():
                out[owners[0]].setdefault(name, sig)
    return [Replica(labels=dict(k), signals=v) for k, v in sorted(out.items())]


def _sig(name: str, value: float) -> Signal:
    return Signal(name=name, value=value, unit="s", window_s=60.0, source="q")


def test_the_replica_fold_means_what_it_meant():
    rng = random.Random(5)
    labels, values = ["pod", "instance", "engine"], ["a", "b", "c"]
    for _ in range(400):
        groups = {}
        for _ in range(rng.randint(0, 8)):
            names = rng.sample(labels, rng.randint(0, 3))
            key = tuple((n, rng.choice(values)) for n in names)
            groups[key] = {s: _sig(s, rng.random()) for s in rng.sample(["x", "y", "z"], rng.randint(1, 3))}
        got = [(r.labels, r.signals) for r in _replicas.fold(groups)]
        want = [(r.labels, r.signals) for r in _reference_fold(groups)]
        assert got == want, groups


def test_the_replica_fold_is_linear_in_the_groups():
    # 10,000 replicas, each with a partial group (no engine label: vLLM's frontend counters), and
    # a few partial groups that two replicas share (dropped). The quadratic fold took minutes.
    groups = {}
    for r in range(10_000):
        pod, inst = ("pod", f"p{r}"), ("instance", f"10.0.{r // 250}.{r % 250}:8000")
        groups[(pod, inst, ("engine", "0"))] = {"ttft_p95": _sig("ttft_p95", r)}
        groups[(pod, inst)] = {"request_rate": _sig("request_rate", r)}
    groups[(("engine", "0"),)] = {"queue_len": _sig("queue_len", 1.0)}
    started = time.monotonic()
    reps = _replicas.fold(groups)
    assert time.monotonic() - started < 5
    assert len(reps) == 10_000
    assert all(set(r.signals) == {"ttft_p95", "request_rate"} for r in reps)
    assert reps[0].signals["request_rate"].value == reps[0].signals["ttft_p95"].value


def _page(engines: int) -> str:
    lines = ["# HELP vllm:num_requests_running x", "# TYPE vllm:num_requests_running gauge",
             "# TYPE vllm:time_to_first_token_seconds histogram"]
    for e in range(engines):
        lines.append(f'vllm:num_requests_running{{engine="{e}",model_name="m"}} 1.0')
    for e in range(engines):
        for le in ("0.1", "1.0", "+Inf"):
            lines.append(f'vllm:time_to_first_token_seconds_bucket{{engine="{e}",le="{le}",model_name="m"}} 2.0')
        lines.append(f'vllm:time_to_first_token_seconds_count{{engine="{e}",model_name="m"}} 2.0')
        lines.append(f'vllm:time_to_first_token_seconds_sum{{engine="{e}",model_name="m"}} 0.5')
    return "\n".join(lines) + "\n"


def test_a_page_past_the_line_cap_is_refused_before_it_is_parsed():
    text = "x 1\n" * 1_000_001
    started = time.monotonic()
    with pytest.raises(BadExposition, match="1,000,001 lines, more than the cap of 200,000 "
                                            r"\(ADVISOR_MAX_METRICS_LINES raises it\)"):
        parse(text)
    assert time.monotonic() - started < 2
    text = "x 1\n" * 250_000
    assert len(parse(text, max_lines=250_000).series("x")) == 1  # raised, it is read (once: the rest repeat)


def test_the_parser_is_linear_where_prometheus_client_was_quadratic():
    # A comment of 600,000 blanks: prometheus_client copies the rest of the line once per blank (s).
    text = "# HELP x" + " " * 600_000 + "y\nfoo 1\n" + 'bar{a="' + "\\\\" * 200_000 + '"} 2\n'
    started = time.monotonic()
    s = parse(text)
    assert time.monotonic() - started < 2
    assert s.series("foo") == {(): 1.0} and len(dict(next(iter(s.series("bar"))))["a"]) == 200_000


def test_a_large_page_parses_in_seconds():
    text = _page(30_000)  # 180,000 lines
    started = time.monotonic()
    s = parse(text)
    assert time.monotonic() - started < 15  # about 1 s here
    assert len(s.series("vllm:time_to_first_token_seconds_bucket")) == 90_000


def _engine(text: str):
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(200, text=text)
        return httpx.Response(404)

    return httpx.MockTransport(handler)


def test_the_engine_probe_stops_at_the_caps_with_the_setting_to_raise(monkeypatch):
    from probes.engine import probe_engine

    def probe(text: str, **caps):
        return probe_engine("http://engine.test", window_s=2, transport=_engine(text), sleep=lambda s: None,
                            local_gpu=False, http=HttpConfig(**caps))

    with pytest.raises(BadExposition, match=r"more than the cap of 1,000 \(ADVISOR_MAX_METRICS_LINES raises it\)"):
        probe(_page(200), max_metrics_lines=1000)
    with pytest.raises(TooLarge, match=r"more than 1,024 bytes: refused \(ADVISOR_MAX_METRICS_BYTES raises the cap\)"):
        probe(_page(200), max_metrics_bytes=1024)
    started = time.monotonic()
    snap = probe(_page(3000))  # 3,000 replicas, 18,000 lines
    assert time.monotonic() - started < 30
    assert len(snap.replicas) == 3000


def test_a_prometheus_answer_past_the_series_cap_is_one_line(monkeypatch):
    from probes import prometheus as prom

    rows = [{"metric": {"pod": f"p{i}", "__advisor_part": "p0"}, "value": [1.7e9, "1"]} for i in range(5001)]

    def send(self, form):
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "vector", "result": rows}})

    monkeypatch.setattr(prom.PrometheusClient, "_send", send)
    with prom.PrometheusClient("http://prom.test", 5.0, HttpConfig(max_series=5000)) as c:
        with pytest.raises(ProbeError, match=r"5,001 series, more than the cap of 5,000 \(ADVISOR_MAX_SERIES raises it"):
            c.query("up", None)
    with prom.PrometheusClient("http://prom.test", 5.0, HttpConfig(max_series=5001)) as c:
        assert len(c.query("up", None)) == 5001


def test_the_caps_come_from_the_settings(monkeypatch):
    from advisor import net
    from advisor.settings import get_settings

    monkeypatch.setenv("ADVISOR_MAX_SERIES", "7")
    monkeypatch.setenv("ADVISOR_MAX_METRICS_LINES", "8")
    monkeypatch.setenv("ADVISOR_MAX_METRICS_BYTES", "4096")
    get_settings.cache_clear()
    try:
        cfg = net.config("prom")
        assert (cfg.max_series, cfg.max_metrics_lines, cfg.max_metrics_bytes) == (7, 8, 4096)
        assert net.config("engine").with_(timeout=3).max_metrics_lines == 8
    finally:
        get_settings.cache_clear()
