"""Diagnosis accuracy: `advisor diagnose` beside vllm-doctor on the same Prometheus, scenario by scenario.

Scenarios: every tests/scenarios/*.yaml, generated to end a few minutes from now and backfilled
into a fresh Prometheus with promtool; then live ones on the real CPU vLLM serving the tiny model,
scraped by a real Prometheus while the load runs: a queue behind --max-num-seqs 2, a queue near
its TTFT SLO, long and short generations mixed (P99 high), prefix caching off under shared
prefixes, and KV-cache preemptions (a KV cache of a few blocks). Both tools read the same server
over the same window (5 minutes for backfilled scenarios, 1 minute for the live ones, whose load
runs 40 s), as a user would run them (`advisor diagnose --prom-url URL --window 5m -o json`,
`vllm-doctor diagnose URL --since 5m --output json`).

Judged for each tool, against an answer key written here (tool-neutral: a map row, and the changes
that the right first check prescribes as knob + direction):
- symptom: the scenario's map row is among what the tool reports (healthy: nothing reported; a
  near-SLO queue: reported as a warning by us, as anything about the queue by vllm-doctor, which has
  no headroom level);
- first check: what the tool says first is one of the right changes. Ours: the top-ranked check's
  mechanism and direction. vllm-doctor's: the first recommendation of its most severe finding,
  read by the keywords in DOCTOR_ADVICE (advice naming no knob counts as wrong);
- in effect: advice to turn on something the deployment already runs (prefix caching that
  vllm:cache_config_info shows on, chunked prefill on vLLM 0.32's V1 engine): every such piece of
  advice the tool gives, not only the first (ours marks those checks "not recommended": they do not
  count). A wrong answer.

    scripts/setup.sh                                          # once
    .venv/bin/python benchmarks/diagnosis_accuracy.py         # all (about 10 minutes on 2 cores)
    .venv/bin/python benchmarks/diagnosis_accuracy.py --no-live   # the backfilled scenarios only
"""

from __future__ import annotations

import argparse
import io
import json
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(ROOT))

from _peers import peer_command  # noqa: E402

from advisor import knobs  # noqa: E402
from advisor.errors import AdvisorError  # noqa: E402
from advisor.localstack import LocalPrometheus, backfill  # noqa: E402
from advisor.localstack.engine import LocalEngine  # noqa: E402
from advisor.localstack.paths import advisor_home  # noqa: E402
from advisor.localstack.traffic import drive_sync  # noqa: E402
from tests.scenarios import generate as gen  # noqa: E402

SCENARIOS = ROOT / "tests" / "scenarios"
RULES = ROOT / "rules"
WINDOW = "5m"
LIVE_WINDOW = "1m"  # a live load runs 40 s: a 5-minute window would dilute its rates five-fold, for both tools

# vllm-doctor 0.6.0's rules (vllm_doctor/rules/*.py) -> the map row (our rule id) each speaks to.
DOCTOR_SYMPTOM = {"ttft_bottleneck": "ADV001", "queue_latency": "ADV001", "queue_pressure": "ADV001",
                  "tpot_bottleneck": "ADV002", "kv_cache_pressure": "ADV004", "error_rate": "ADV006",
                  "preemption_pressure": "ADV007", "prefix_cache_efficiency": "ADV008",
                  "replica_imbalance": "ADV010", "low_throughput": None}
# Its recommendations' words -> the change they prescribe (first match wins).
DOCTOR_ADVICE = [(r"(?i)(reduce|lower|decrease).*max_num_seqs", ("max_num_seqs", "down")),
                 (r"(?i)(increase|raise).*max_num_seqs", ("max_num_seqs", "up")),
                 (r"(?i)(reduce|lower).*max_num_batched_tokens", ("max_num_batched_tokens", "down")),
                 (r"(?i)(increase|raise).*max_num_batched_tokens", ("max_num_batched_tokens", "up")),
                 (r"(?i)add replicas", ("replicas", "up")),
                 (r"(?i)chunked prefill|chunked-prefill", ("chunked_prefill", "on")),
                 (r"(?i)prefix caching|prefix-caching", ("prefix_caching", "on")),
                 (r"(?i)tensor parallel", ("tensor_parallel", "up")),
                 (r"(?i)gpu.memory.utilization", ("gpu_memory_utilization", "up")),
                 (r"(?i)kv.cache.dtype|fp8 kv", ("kv_cache_dtype", "down"))]
# Checks whose prescribed change has an equal alternative in the map ("fix supply and demand first":
# a queue is cured by a wider batch or by more capacity).
SAME_CURE = {("max_num_seqs", "up"): [("replicas", "up")],
             ("gpu_memory_utilization", "up"): [("max_num_seqs", "down")]}


@dataclass
class Key:
    symptom: str | None  # our rule id of the map row; None: healthy
    first: list[tuple[str, str]]  # the right first changes
    warning: bool = False  # the right answer is a warning before the breach
    slo: dict | None = None


@dataclass
class Judged:
    symptom_ok: bool
    first_ok: bool
    in_effect: list[str]
    said: str


@dataclass
class Row:
    scenario: str
    source: str
    tools: dict[str, Judged] = field(default_factory=dict)


def check_change(check_ref: str) -> tuple[str, str]:
    """"ADV001/queueing" -> the (mechanism, direction) that check prescribes, from its rule YAML."""
    rule_id, check_id = check_ref.split("/")
    rule = yaml.safe_load(next(RULES.glob(f"{rule_id}-*.yaml")).read_text())
    c = next(c for c in rule["checks"] if c["id"] == check_id)
    return c["mechanism"], str(c["direction"])


def key_of(expect: dict, slo: dict | None) -> Key:
    if expect.get("warns"):
        change = check_change(expect["top"])
        return Key(expect["warns"], [change, *SAME_CURE.get(change, [])], warning=True, slo=slo)
    if expect.get("healthy"):
        return Key(None, [], slo=slo)
    change = check_change(expect["top"])
    return Key(expect["rule"], [change, *SAME_CURE.get(change, [])], slo=slo)


@dataclass
class Deployed:
    """What is known of the deployment's configuration: what cache_config_info reveals; for a live
    engine also its argv and version (so the engine's defaults count); backfilled: argv unknown."""
    config: dict
    args: list[str] | None = None
    version: str | None = None


def in_effect(change: tuple[str, str], d: Deployed) -> bool:
    """Advice to switch on (off) what the deployment already runs on (off)."""
    mechanism, direction = change
    if direction not in ("on", "off") or mechanism not in knobs.KNOBS:
        return False
    current = knobs.effective_value(d.args or [], mechanism, "vllm", d.config, d.version, d.args is not None)
    return current.known and current.value == (direction == "on")


def judge_ours(body: dict, key: Key, d: Deployed) -> Judged:
    findings = body.get("findings", [])
    breaches = {f["rule_id"] for f in findings if f["severity"] != "warning"}
    warned = {f["rule_id"] for f in findings if f["severity"] == "warning"}
    if key.symptom is None:
        symptom_ok = not breaches
    elif key.warning:
        symptom_ok = key.symptom in warned and key.symptom not in breaches
    else:
        symptom_ok = key.symptom in breaches
    checks = sorted((c for f in findings for c in f["checks"]), key=lambda c: c.get("rank") or 1e9)
    top = checks[0] if checks else None
    first = (top["mechanism"], str(top["direction"])) if top else None
    first_ok = (first in key.first) if key.first else top is None
    advised = [c for c in checks if not c.get("already")]
    wrong = sorted({f"{c['mechanism']} {c['direction']}" for c in advised
                    if in_effect((c["mechanism"], str(c["direction"])), d)})
    said = ", ".join(f"{f['rule_id']}{'(w)' if f['severity'] == 'warning' else ''}" for f in findings) or "healthy"
    if top:
        said += f"; first {top['rule_id']}/{top['id']} ({first[0]} {first[1]})"
    return Judged(symptom_ok, first_ok, wrong, said)


def advice(text: str) -> tuple[str, str] | None:
    return next((change for pattern, change in DOCTOR_ADVICE if re.search(pattern, text)), None)


def judge_doctor(body: dict, key: Key, d: Deployed) -> Judged:
    fired = [c for c in body.get("checks", []) if c.get("finding")]
    order = ["critical", "warning", "info"]
    fired.sort(key=lambda c: order.index(c["finding"].get("severity", "info")))  # stable: its own order within
    symptoms = {DOCTOR_SYMPTOM.get(c["id"]) for c in fired}
    symptom_ok = not fired if key.symptom is None else key.symptom in symptoms
    recs = [r for c in fired for r in c["finding"].get("recommendations", [])]
    first_text = fired[0]["finding"].get("recommendations", [None])[0] if fired else None
    first = advice(first_text) if first_text else None
    first_ok = (first in key.first) if key.first else not fired
    wrong = sorted({f"{a[0]} {a[1]}" for a in map(advice, recs) if a and in_effect(a, d)})
    said = ", ".join(f"{c['id']}({c['finding'].get('severity')})" for c in fired) or "ok"
    if first_text:
        said += f"; first: {first_text!r}" + (f" ({first[0]} {first[1]})" if first else " (no knob)")
    return Judged(symptom_ok, first_ok, wrong, said)


def revealed(prom_url: str) -> dict:
    """vllm:cache_config_info's labels as the Prometheus holds them (what both tools could read)."""
    try:
        r = httpx.get(f"{prom_url}/api/v1/query", params={"query": "vllm:cache_config_info"}, timeout=10).json()
        result = r["data"]["result"]
        return {k: v for k, v in result[0]["metric"].items() if not k.startswith("__")} if result else {}
    except (httpx.HTTPError, KeyError, ValueError, IndexError):
        return {}


def run_tools(prom_url: str, key: Key, doctor: Path, tmp: Path, d: Deployed, window: str = WINDOW) -> dict[str, Judged]:
    ours = [str(ROOT / ".venv" / "bin" / "advisor"), "diagnose", "--prom-url", prom_url, "--window", window, "-o", "json"]
    if key.slo:
        slo = tmp / "slo.yaml"
        slo.write_text(yaml.safe_dump(key.slo))
        ours += ["--slo", str(slo)]
    theirs = [str(doctor), "diagnose", prom_url, "--since", window, "--output", "json"]
    out = {}
    for name, cmd, judge in (("advisor", ours, judge_ours), ("vllm-doctor", theirs, judge_doctor)):
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=tmp)
        try:
            body = json.loads(p.stdout)
        except ValueError:
            out[name] = Judged(False, False, [], f"failed (exit {p.returncode}): {(p.stderr or p.stdout).strip()[-200:]}")
            continue
        out[name] = judge(body, key, d)
    return out


def backfilled(doctor: Path, work: Path, only: list[str]) -> list[Row]:
    rows = []
    for path in sorted(SCENARIOS.glob("*.yaml")):
        raw = gen.read(path)
        if "expect" not in raw or (only and not any(o in path.stem for o in only)):
            continue
        # Both tools look at "now": the history ends two minutes ahead, sampled every 15 s.
        scn = gen.load(path, end=int((time.time() + 120) // 15 * 15))
        text = io.StringIO()
        gen.write(gen.build(scn), scn.timestamps, text)
        with tempfile.TemporaryDirectory(prefix="advisor-accuracy-", dir=work) as tmp:
            data = Path(tmp) / "data"
            backfill(text.getvalue(), data)
            prom = LocalPrometheus([], data_dir=data).start(timeout=120)
            try:
                key = key_of(raw["expect"], raw.get("slo"))
                rows.append(Row(path.stem, "backfilled", run_tools(prom.url, key, doctor, Path(tmp),
                                                                   Deployed(revealed(prom.url)))))
            finally:
                prom.stop()
        print(f"  {path.stem}: done", flush=True)
    return rows


def _load(url: str, *streams: dict) -> None:
    import threading

    results = []
    threads = [threading.Thread(target=lambda kw=kw: results.append(drive_sync(url, **kw))) for kw in streams]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    errors = sum(r.errors for r in results)
    if errors:
        print(f"    ({errors} requests failed: {next(r.first_error for r in results if r.first_error)})", flush=True)


def live(doctor: Path, work: Path, only: list[str]) -> list[Row]:
    rows = []
    version = "0.32.0"

    def scenario(name: str, engine_kw: dict, streams: list[dict], key: Key, calibrate=None) -> None:
        if only and not any(o in name for o in only):
            return
        try:
            with tempfile.TemporaryDirectory(prefix="advisor-accuracy-", dir=work) as tmp, \
                    LocalEngine(**engine_kw) as engine:
                prom = LocalPrometheus([engine.target]).start()
                try:
                    _load(engine.url, *streams)
                    time.sleep(6)  # a scrape or two after the load
                    if calibrate:
                        key.slo = calibrate(prom.url, Path(tmp))
                    deployed = Deployed(revealed(prom.url), engine.command()[3:], version)
                    rows.append(Row(name, "live CPU vLLM", run_tools(prom.url, key, doctor, Path(tmp), deployed,
                                                                     LIVE_WINDOW)))
                finally:
                    prom.stop()
        except AdvisorError as e:  # one scenario that cannot run costs that scenario only
            print(f"  {name}: could not run: {str(e).splitlines()[0]}", flush=True)
            return
        print(f"  {name}: done", flush=True)

    queue = Key("ADV001", [("max_num_seqs", "up"), ("replicas", "up")])
    scenario("queue behind max_num_seqs 2", {"max_num_seqs": 2},
             [{"requests": 10_000, "duration_s": 40, "concurrency": 24, "prompt_words": 800, "max_tokens": 32}], queue)

    def near_slo(prom_url: str, tmp: Path) -> dict:
        """The SLO at the TTFT p95 measured over the same window / 0.875 (as the e2e test sets it)."""
        loose = {"tpot_p95": 10, "e2e_p99": 1000, "error_rate": 0.5}
        probe = tmp / "probe.yaml"
        probe.write_text(yaml.safe_dump({"ttft_p95": 0.001, **loose}))
        p = subprocess.run([str(ROOT / ".venv" / "bin" / "advisor"), "diagnose", "--prom-url", prom_url, "--window",
                            LIVE_WINDOW, "--slo", str(probe), "-o", "json"], capture_output=True, text=True, timeout=180)
        body = json.loads(p.stdout)
        p95 = next(e["value"] for f in body["findings"] if f["rule_id"] == "ADV001" for e in f["evidence"]
                   if e["signal"] == "ttft_p95")
        return {"ttft_p95": p95 / 0.875, **loose}

    scenario("queue near its TTFT SLO", {"max_num_seqs": 2},
             [{"requests": 10_000, "duration_s": 40, "concurrency": 8, "prompt_words": 200, "max_tokens": 32}],
             Key("ADV001", [("max_num_seqs", "up"), ("replicas", "up")], warning=True), calibrate=near_slo)
    scenario("long and short generations mixed", {"max_num_seqs": 2},
             [{"requests": 10_000, "duration_s": 40, "concurrency": 1, "prompt_words": 40, "max_tokens": 16, "seed": 1},
              {"requests": 10_000, "duration_s": 40, "concurrency": 1, "prompt_words": 40, "max_tokens": 600, "seed": 2}],
             Key("ADV003", [("replicas", "up")]))
    scenario("prefix caching off, shared prefixes", {"extra_args": ["--no-enable-prefix-caching"]},
             [{"requests": 10_000, "duration_s": 40, "concurrency": 4, "prompt_words": 900, "shared_prefix_words": 800,
               "max_tokens": 8}],
             Key("ADV008", [("prefix_caching", "on")]))
    # 24 blocks hold about 2,700 tokens (vLLM refuses fewer than one max-length request needs); eight
    # requests of 300 + 300 tokens need 4,800.
    scenario("KV cache of 24 blocks: preemptions", {"max_num_seqs": 8, "extra_args": ["--num-gpu-blocks-override", "24"]},
             [{"requests": 10_000, "duration_s": 40, "concurrency": 8, "prompt_words": 300, "max_tokens": 300}],
             Key("ADV007", [("gpu_memory_utilization", "up"), ("max_num_seqs", "down")]))
    return rows


def mark(ok: bool) -> str:
    return "yes" if ok else "NO"


def report(rows: list[Row]) -> None:
    print("\n| scenario | source | tool | right symptom | right first check | advice already in effect | what it said |")
    print("|---|---|---|---|---|---|---|")
    totals: dict[str, list[int]] = {}
    for r in rows:
        for tool, j in r.tools.items():
            t = totals.setdefault(tool, [0, 0, 0])
            t[0] += j.symptom_ok
            t[1] += j.first_ok
            t[2] += bool(j.in_effect)
            print(f"| {r.scenario} | {r.source} | {tool} | {mark(j.symptom_ok)} | {mark(j.first_ok)} | "
                  f"{', '.join(j.in_effect) or '-'} | {j.said.replace('|', '/')} |")
    print(f"\nTotals over {len(rows)} scenarios (right symptom, right first check, scenarios with advice already in effect):")
    for tool, (s, f, w) in totals.items():
        print(f"  {tool}: {s}/{len(rows)}, {f}/{len(rows)}, {w}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-live", action="store_true", help="only the backfilled scenarios (no engine)")
    ap.add_argument("--doctor-version", default="0.6.0")
    ap.add_argument("--work", type=Path, default=advisor_home() / "bench")
    ap.add_argument("--only", nargs="+", default=[], help="only the scenarios whose names contain one of these")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    doctor = peer_command(args.work, "vllm-doctor", args.doctor_version, "vllm-doctor")
    rev = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True, cwd=ROOT)
    print(f"date: {time.strftime('%Y-%m-%d %H:%M %Z')}; vllm-doctor {args.doctor_version}; advisor at "
          f"{rev.stdout.strip() or 'unknown revision'}", flush=True)
    print("backfilled scenarios (tests/scenarios):", flush=True)
    rows = backfilled(doctor, args.work, args.only)
    if not args.no_live:
        print("live scenarios (CPU vLLM, tiny model):", flush=True)
        rows += live(doctor, args.work, args.only)
    report(rows)


if __name__ == "__main__":
    main()
