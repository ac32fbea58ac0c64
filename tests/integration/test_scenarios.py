"""Every symptom of the map's table, backfilled into a real Prometheus and diagnosed end to end.

Each tests/scenarios/*.yaml is generated (tests/scenarios/generate.py), written into a fresh TSDB
with promtool, served by one Prometheus, probed at the scenario's end (and at any `evals` offsets,
promtool's eval_time), diagnosed with the default SLOs, and judged against its `expect`/`absent`.
"""

from __future__ import annotations

import io
import math
import re
from datetime import datetime, timezone
from pathlib import Path

import subprocess
from dataclasses import dataclass

import httpx
import pytest
import yaml

from advisor.app.rules_export import ExportRequest, export
from advisor.diagnosis import SLO, diagnose, load_rules, per_replica_signals
from advisor.localstack import LocalPrometheus, backfill
from probes import _delta, probe_prometheus
from probes.catalog import dialects
from probes.exposition import parse
from tests.scenarios import generate as gen
from tests.support.promtool_rules import firing

# One worker runs the whole module (scripts/test.sh: --dist loadfile), so its server starts once.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SCENARIOS = Path(__file__).parents[1] / "scenarios"
FILES = sorted(SCENARIOS.glob("*.yaml"))
CAPTURE = Path(__file__).parents[1] / "fixtures" / "vllm-0.32.0-cpu" / "metrics-queueing-t1.txt"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """name -> (scenario, families, Prometheus): one server per scenario file, started on first use."""
    live: dict[str, tuple] = {}

    def get(path: Path):
        if path.stem not in live:
            scn = gen.load(path)
            families = gen.build(scn)
            text = io.StringIO()
            gen.write(families, scn.timestamps, text)
            data = tmp_path_factory.mktemp(path.stem) / "data"
            backfill(text.getvalue(), data)
            prom = LocalPrometheus([], data_dir=data).start()
            live[path.stem] = (scn, families, prom)
        return live[path.stem]

    yield get
    for _, _, prom in live.values():
        prom.stop()


def _at(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=timezone.utc)


def _summary(diag) -> str:
    lines = [f"findings: {[(f.rule_id, f.severity) for f in diag.findings]}"]
    lines += [f"  {c.rank}. {c.rule_id}/{c.id} score={c.score} held_back={c.held_back} already={c.already}"
              for c in diag.checks]
    lines += [f"  not evaluated: {n.rule_id}: {n.reason}" for n in diag.not_evaluated]
    return "\n".join(lines)


EXPECT_KEYS = {"healthy", "rule", "also", "top", "order", "warns", "bucket_note"}


def _judge(diag, expect: dict, absent: list[str], where: str) -> None:
    """rule/also/absent: breaches (severity above warning); warns: the one rule that warns (none
    when not given); bucket_note: the rule whose evidence says its quantile's bucket holds the SLO."""
    assert set(expect) <= EXPECT_KEYS, f"{where}: unknown expect keys {set(expect) - EXPECT_KEYS}"
    fired = {f.rule_id for f in diag.findings if f.severity != "warning"}
    warned = {f.rule_id for f in diag.findings if f.severity == "warning"}
    info = f"{where}\n{_summary(diag)}"
    assert warned == ({expect["warns"]} if expect.get("warns") else set()), f"warnings: {sorted(warned)}\n{info}"
    if expect.get("bucket_note"):
        finding = next(f for f in diag.findings if f.rule_id == expect["bucket_note"])
        assert any(e.bucket_note for e in finding.evidence), f"no bucket note\n{info}"
    if expect.get("healthy"):
        assert not fired and diag.healthy, f"expected a healthy diagnosis, got {sorted(fired)}\n{info}"
    wanted = [r for r in [expect.get("rule"), *expect.get("also", [])] if r]
    for rid in wanted:
        assert rid in fired, f"{rid} should fire\n{info}"
    for rid in absent:
        assert rid not in fired, f"{rid} must not fire\n{info}"
    if expect.get("top"):
        top = diag.checks[0]
        assert f"{top.rule_id}/{top.id}" == expect["top"], f"rank 1 should be {expect['top']}\n{info}"
    if expect.get("order"):
        finding = next(f for f in diag.findings if f.rule_id == expect["rule"])
        got = [c.id for c in sorted(finding.checks, key=lambda c: c.rank)][: len(expect["order"])]
        assert got == expect["order"], f"{expect['rule']} checks should start {expect['order']}\n{info}"


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_scenario(path, served, tmp_path):
    scn, families, prom = served(path)
    rules = load_rules()
    evals = [{"at": 0, "expect": scn.raw.get("expect") or {}, "absent": scn.raw.get("absent") or []},
             *(scn.raw.get("evals") or [])]
    assert evals[0]["expect"] or evals[0]["absent"], f"{path.name} has no expect or absent block"
    exported = _exported_rules(scn, tmp_path)
    for ev in evals:
        at = scn.end + gen.seconds(ev.get("at", 0))
        snap = probe_prometheus(prom.url, window_s=scn.window, at=_at(at))
        diag = diagnose(snap, rules, SLO(**(scn.raw.get("slo") or {})))
        where = f"{path.name} at end{ev.get('at') or ''}"
        _judge(diag, ev.get("expect") or {}, ev.get("absent") or [], where)
        # The exported alerting rules, run by promtool over the same samples, fire exactly where
        # this diagnosis found the rule (breach or warning), for every level the export holds.
        alerts = {f.rule_id + ("Warning" if f.severity == "warning" else "") for f in diag.findings}
        expected = alerts & exported.alerts
        r = firing(exported.path, families, scn.timestamps, at, scn.window, scn.interval, expected, tmp_path)
        assert r.returncode == 0, f"{where}: the alerts that fire differ from the diagnosis' " \
                                  f"{sorted(expected)}\n{r.stdout[-3000:]}{r.stderr[-2000:]}\n{_summary(diag)}"


@dataclass
class Exported:
    path: Path
    alerts: set[str]  # the alert names the file holds (a level PromQL cannot express is left out)


def _exported_rules(scn, tmp_path: Path) -> Exported:
    """`advisor rules export` for the scenario's SLOs and window, every alert without a for: delay
    (the diagnosis is of one instant), checked by promtool."""
    path = tmp_path / "rules.yaml"
    text = export(ExportRequest(slo=_slo_file(scn, tmp_path), dialect="vllm", window_s=scn.window,
                                breach_for_s=0, warning_for_s=0))
    path.write_text(text)
    check = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    doc = yaml.safe_load(text)
    return Exported(path, {r["alert"] for g in doc["groups"] for r in g["rules"] if "alert" in r})


def _slo_file(scn, tmp_path: Path) -> Path | None:
    if not scn.raw.get("slo"):
        return None
    path = tmp_path / "slo.yaml"
    path.write_text(yaml.safe_dump(scn.raw["slo"]))
    return path


def test_every_grafana_panel_query_returns_data_on_the_scenarios(served):
    """deploy/grafana's panels run against the real Prometheus holding the backfilled scenarios, each
    at its scenario's end: every query answers data in at least one of them."""
    import json

    shipped = json.loads((Path(__file__).parents[2] / "deploy" / "grafana" / "llm-advisor-vllm.json").read_text())
    answered: set[str] = set()
    for path in FILES:
        scn, _, prom = served(path)
        for p in shipped["panels"]:
            if p["title"] in answered:
                continue
            r = httpx.get(f"{prom.url}/api/v1/query", params={"query": p["targets"][0]["expr"], "time": scn.end},
                          timeout=30).json()
            assert r["status"] == "success", (p["title"], r)
            if r["data"]["result"]:
                answered.add(p["title"])
    assert answered == {p["title"] for p in shipped["panels"]}, \
        sorted({p["title"] for p in shipped["panels"]} - answered)


def test_bucket_table_is_vllms_own():
    """The generator's buckets are the ones the real engine exposes, not made up."""
    seen: dict[str, list[float]] = {}
    for line in CAPTURE.read_text().splitlines():
        m = re.match(r'(vllm:\w+)_bucket\{.*le="([^"]+)"', line)
        if m and m.group(2) != "+Inf":
            seen.setdefault(m.group(1), []).append(float(m.group(2)))
    for name, bounds in gen.BUCKETS.items():
        assert list(bounds) == seen[name], name


# Quantiles: both paths interpolate linearly inside the same bucket, so Prometheus and the
# scrape math agree to float precision; against the true value (every observation is the same
# number) the interpolation may be off by up to the width of the bucket holding it.
EXACT = 1e-9


def test_prometheus_and_scrape_math_agree(served):
    """Three replicas, one with 5x the traffic: the aggregate PromQL equals both the sum we know we
    put in and the engine probe's two-scrape delta math over the same window."""
    scn, families, prom = served(SCENARIOS / "replica-imbalance.yaml")
    assert len(scn.replicas) == 3
    snap = probe_prometheus(prom.url, window_s=scn.window, at=_at(scn.end))
    got = {k: s.value for k, s in snap.signals.items()}

    # What went in: per_step observations per replica per interval, times each replica's traffic.
    per_step, traffic = 15, [1, 1, 5]
    rate = sum(traffic) * per_step / scn.interval
    known = {"request_rate": rate, "prompt_tokens_per_s": rate * 180, "generation_tokens_per_s": rate * 100,
             "e2e_mean": 2.4, "ttft_mean": 0.45, "prompt_len_mean": 180, "prefix_cache_hit_rate": 0.5,
             "error_rate": 0.0, "preemptions_per_s": 0.0, "requests_waiting_avg": 2.0,
             "requests_running_avg": 36.0, "kv_cache_usage_avg": 0.3}
    for name, want in known.items():
        assert got[name] == pytest.approx(want, rel=EXACT, abs=EXACT), name
    per_replica = sorted(r.signals["request_rate"].value for r in snap.replicas)
    assert per_replica == pytest.approx([t * per_step / scn.interval for t in sorted(traffic)], rel=EXACT)

    bucket = {"ttft_p95": (0.25, 0.5, 0.45), "e2e_p99": (2.0, 2.5, 2.4), "tpot_p95": (0.01, 0.025, 0.02)}
    for name, (lo, hi, true) in bucket.items():
        assert lo < got[name] <= hi and abs(got[name] - true) <= hi - lo, name

    # The engine probe's math on what /metrics would have shown at the window's two ends.
    scrapes = [parse(gen.exposition_at(families, scn.timestamps, t), t) for t in (scn.end - scn.window, scn.end)]
    scraped = _delta.compute(dialects()["vllm"], scrapes)[()]
    compared = [n for n, s in scraped.items() if s.value is not None and got.get(n) is not None]
    assert {"request_rate", "ttft_p95", "tpot_p95", "e2e_p99", "queue_time_p95", "kv_cache_usage_max"} <= set(compared)
    for name in compared:
        assert got[name] == pytest.approx(scraped[name].value, rel=EXACT, abs=EXACT), name
        assert snap.signals[name].bucket == scraped[name].bucket, f"{name}: the same bucket from both probes"
    assert snap.signals["ttft_p95"].bucket == (0.25, 0.5)
    assert not [n for n, s in scraped.items() if (s.value is None) != (got.get(n) is None)]


def test_expanding_notation_is_promtools():
    assert gen.expand("1+1x3", 4).tolist() == [1, 2, 3, 4]
    assert gen.expand("5x2 7", 5).tolist() == [5, 5, 5, 7, 7]  # axN is N+1 values; the last one holds
    got = gen.expand("_x2 3 -1-2x1", 5).tolist()
    assert [math.isnan(v) for v in got[:2]] == [True, True] and got[2:] == [3, -1, -3]


@pytest.mark.parametrize("series, message", [
    ({"gauge": "x", "values": "1 two"}, "bad value token 'two'"),
    ({"histogram": "made_up_seconds", "per_step": 1, "value": 1}, "no known buckets"),
    ({"gpu": "DCGM_FI_DEV_GPU_UTIL", "values": 1}, "need a `gpus:` list"),
    ({"gauge": "x", "counter": "y"}, "exactly one of"),
])
def test_bad_scenarios_are_named(series, message):
    with pytest.raises(gen.ScenarioError, match=re.escape(message)):
        gen.build(gen.parse({"duration": "1m", "series": [series]}, end=1_800_000_000))


@pytest.mark.parametrize("name", ["replica-imbalance", "multi-gpu-not-linear"])
def test_a_diagnosis_breaks_down_only_what_its_rules_read_per_replica(served, name):
    """diagnose asks Prometheus per replica only for what the rules read there (spreads); the
    replicas and GPUs are still all counted, and those values are the full breakdown's."""
    scn, _, prom = served(SCENARIOS / f"{name}.yaml")
    full = probe_prometheus(prom.url, window_s=scn.window, at=_at(scn.end))
    wanted = per_replica_signals(load_rules())
    assert wanted == {"request_rate", "ttft_p95"}
    lean = probe_prometheus(prom.url, window_s=scn.window, at=_at(scn.end), per_replica=wanted)
    assert len(lean.replicas) == len(full.replicas) >= 2
    for a, b in zip(lean.replicas, full.replicas):
        assert a.labels == b.labels and set(a.signals) == wanted
        assert {k: a.signals[k].value for k in wanted} == {k: b.signals[k].value for k in wanted}
    assert lean.signals == full.signals, "the aggregate is untouched"
    assert len(lean.gpu.devices) == len(full.gpu.devices)
    assert all(len(d.signals) == 1 for d in lean.gpu.devices) or not lean.gpu.available
    nothing = probe_prometheus(prom.url, window_s=scn.window, at=_at(scn.end), per_replica=set())
    assert len(nothing.replicas) == len(full.replicas), "one signal per replica keeps them counted"


def test_a_queue_near_the_slo_is_a_warning_from_the_command_line(served, tmp_path):
    """`advisor diagnose` on a queue whose TTFT p95 sits at 87.5 % of the SLO (set by the test from
    the p95 it reads first, on the same window): the SLO holds, the queue dominates, and the advisor
    warns with the queueing check first and exits 0. Backfilled: the warning needs the queue's
    histograms, not an engine's timing (it was provoked live on the CPU engine before)."""
    import json

    from typer.testing import CliRunner

    from advisor.cli import app

    scn, _, prom = served(SCENARIOS / "ttft-near-slo-straddling-bucket.yaml")
    runner = CliRunner()

    def diagnose_json(slo_text: str) -> tuple[int, dict]:
        slo = tmp_path / "slo.yaml"
        slo.write_text(slo_text)
        r = runner.invoke(app, ["diagnose", "--prom-url", prom.url, "--window", f"{scn.window:g}s", "--at",
                                f"{scn.end:.3f}", "--slo", str(slo), "--output", "json"])
        assert r.exit_code in (0, 1), r.output
        return r.exit_code, json.loads(r.stdout)

    loose = "tpot_p95: 10\ne2e_p99: 1000\nerror_rate: 0.5\n"  # only TTFT is judged here
    _, first = diagnose_json("ttft_p95: 0.001\n" + loose)  # any TTFT breaches it: the finding shows the p95
    measured = next((e["value"] for f in first["findings"] if f["rule_id"] == "ADV001" for e in f["evidence"]
                     if e["signal"] == "ttft_p95"), None)
    assert measured, (first["findings"], first["not_evaluated"])
    code, d = diagnose_json(f"ttft_p95: {measured / 0.875}\n" + loose)
    assert code == 0 and d["healthy"] and d["summary"] == "healthy, with 1 warning", (d["summary"], d["findings"])
    [warning] = d["findings"]
    assert (warning["rule_id"], warning["severity"]) == ("ADV001", "warning")
    signals = {e["signal"] for e in warning["evidence"]}
    assert "ttft_p95 / slo:ttft_p95" in signals and signals & {"queue_time_mean / ttft_mean", "requests_waiting_avg"}
    top = min(warning["checks"], key=lambda c: c["rank"])
    assert (top["id"], top["mechanism"]) == ("queueing", "max_num_seqs"), top
