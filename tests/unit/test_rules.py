"""Every rule's fixture cases (tests/rule_cases/<ID>.yaml), run by one parametrised test, and a
meta-test that every rule is documented and has cases that fire, don't fire, and sit on a boundary."""

from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from advisor.diagnosis import SLO, diagnose, load_rules
from advisor.diagnosis.rules import DOC_FIELDS, parse_rule
from advisor.models import read
from advisor.workload.tokenize_cost import TokenizationCost, TokenizePoint
from probes import EngineInfo, GpuDevice, GpuStatus, Replica, Signal, Snapshot, signal_defs
from probes.catalog import signal_unit

CASES = Path(__file__).parent.parent / "rule_cases"
MODELS = Path(__file__).parent.parent / "fixtures" / "models"
RULES = {r.id: r for r in load_rules()}


def _signals(values: dict) -> dict[str, Signal]:
    out = {}
    for name in signal_defs():
        v = values.get(name)
        out[name] = Signal(name=name, value=None if v is None else float(v), unit=signal_unit(name), window_s=60,
                           source="case", missing=None if v is not None else "not in this case")
    return out


def snapshot_for(case: dict) -> Snapshot:
    unknown = set(case.get("signals", {})) - set(signal_defs())
    assert not unknown, f"case names unknown signals {unknown}"
    return Snapshot(
        target="case", via="engine", window_s=60, taken_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
        engine=EngineInfo(kind="vllm", version=case.get("version"), config=case.get("config", {}),
                          config_source="case config"),
        signals=_signals(case.get("signals", {})),
        replicas=[Replica(labels={"pod": f"p{i}"}, signals=_signals(r)) for i, r in enumerate(case.get("replicas", []))],
        gpu=GpuStatus(available=True, source="case", devices=[GpuDevice(index=i) for i in range(case.get("gpus", 0))]),
    )


def tokenized(case: dict, snap) -> TokenizationCost | None:
    """A case's `tokenization: SECONDS`: what timing /tokenize at the mean prompt length measured."""
    if "tokenization" not in case:
        return None
    cost = case["tokenization"]
    point = TokenizePoint(length_of="prompt_len_mean", prompt_tokens=int(snap.value("prompt_len_mean") or 100),
                          round_trip_s=0.002 + cost, cost_s=cost)
    ttft = snap.value("ttft_mean")
    return TokenizationCost(endpoint="POST http://engine.test/tokenize", model="m", rounds=7, base_s=0.002,
                            points=[point], ttft_mean_s=ttft, share=cost / ttft if ttft else None)


def _cases():
    for path in sorted(CASES.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        for case in data["cases"]:
            yield pytest.param(data["rule"], case, id=f"{data['rule']}: {case['name']}")


@pytest.mark.parametrize("rule_id, case", list(_cases()))
def test_rule_case(rule_id, case):
    rule = RULES[rule_id]
    if "overrides" in case:
        rule = parse_rule(yaml.safe_load(rule.path.read_text()), rule.path, case["overrides"])
    model = read(MODELS / f"{case['model']}.json") if "model" in case else None
    snap = snapshot_for(case)
    result = diagnose(snap, [rule], SLO(**case.get("slo", {})), model=model, tokenization=tokenized(case, snap))
    expect = case["expect"]
    mine = [f for f in result.findings if f.rule_id == rule_id]
    finding = next((f for f in mine if f.severity != "warning"), None)
    warned = next((f for f in mine if f.severity == "warning"), None)
    skipped = next((n for n in result.not_evaluated if n.rule_id == rule_id), None)
    if expect["fires"] == "unknown":
        assert finding is None and warned is None and skipped is not None, "expected 'not evaluated'"
        assert skipped.reason
        return
    assert (finding is not None) == expect["fires"], skipped.reason if skipped else "fired" if finding else "did not fire"
    # A case that says nothing of warnings expects none (a breach is never also a warning).
    assert (warned is not None) == expect.get("warns", False), "warned" if warned else "did not warn"
    assert result.healthy == (finding is None), "warnings alone leave the diagnosis healthy"
    finding = finding or warned
    if not finding:
        return
    assert finding.evidence and all(e.text for e in finding.evidence)
    checks = sorted(finding.checks, key=lambda c: c.rank)
    if "severity" in expect:
        assert finding.severity == expect["severity"]
    if "top_check" in expect:
        assert checks[0].id == expect["top_check"], [(c.id, c.score, c.reason) for c in checks]
    if "not_top" in expect:
        assert checks[0].id != expect["not_top"], [(c.id, c.score, c.reason) for c in checks]
    if "order" in expect:
        assert [c.id for c in checks][: len(expect["order"])] == expect["order"]
    if "held_back" in expect:
        assert sorted(c.id for c in checks if c.held_back) == sorted(expect["held_back"])
        assert all("held back" in c.reason for c in checks if c.held_back)
    if "already" in expect:
        assert sorted(c.id for c in checks if c.already) == sorted(expect["already"])
    assert all(c.reason for c in checks)


def test_every_rule_is_documented_and_has_cases():
    problems = []
    for rid, rule in RULES.items():
        problems += [f"{rid}: docs.{f} missing" for f in DOC_FIELDS if not rule.docs.get(f)]
        path = CASES / f"{rid}.yaml"
        if not path.exists():
            problems.append(f"{rid}: no case file {path.name}")
            continue
        cases = yaml.safe_load(path.read_text())["cases"]
        fires = [c for c in cases if c["expect"]["fires"] is True]
        quiet = [c for c in cases if c["expect"]["fires"] is False]
        boundary = [c for c in cases if c["name"].startswith("boundary")]
        if not fires or not quiet or not boundary:
            problems.append(f"{rid}: needs cases that fire, that don't, and a boundary case")
        if not any("top_check" in c["expect"] for c in fires):
            problems.append(f"{rid}: no case asserts the top-ranked check")
        if rule.warning_when is not None:
            warns = [c for c in cases if c["expect"].get("warns")]
            edge = [c for c in cases if c["name"].startswith("boundary") and "warn" in c["name"]]
            if not warns or not edge or not any("top_check" in c["expect"] for c in warns):
                problems.append(f"{rid}: has a warning level: needs cases that warn (one asserting the top "
                                "check) and a boundary case of the warning level")
    assert not problems, "\n".join(problems)


def test_rule_files_follow_id_naming():
    for rule in RULES.values():
        assert rule.path.name.startswith(f"{rule.id}-{rule.name}"), rule.path.name


def test_every_map_symptom_row_is_covered():
    rows = ["TTFT high, TPOT normal", "TPOT high", "throughput high but P99 high",
            "memory full first, GPU not busy", "multi-GPU scaling not linear"]
    for row in rows:
        assert any(r.map_row.startswith(row) for r in RULES.values()), row


def test_a_breach_outranks_a_warning_and_warnings_alone_are_healthy():
    """TTFT near its SLO with a queue (ADV001 warns) while errors break theirs (ADV006 fires): the
    breach's checks come first whatever the scores; without the breach the diagnosis is healthy."""
    signals = {"ttft_p95": 0.95, "tpot_p95": 0.02, "queue_time_mean": 0.9, "ttft_mean": 0.92,
               "requests_waiting_avg": 8, "error_rate": 0.012, "kv_cache_usage_max": 0.2}
    rules = [RULES["ADV001"], RULES["ADV006"]]
    both = diagnose(snapshot_for({"signals": signals}), rules, SLO())
    assert {(f.rule_id, f.severity) for f in both.findings} == {("ADV001", "warning"), ("ADV006", "low")}
    assert not both.healthy and both.summary == "1 symptom, worst low, with 1 warning"
    ranked = both.checks
    assert ranked[0].rule_id == "ADV006"
    assert all(c.rule_id == "ADV006" for c in ranked[:len(RULES["ADV006"].checks)])
    warned = diagnose(snapshot_for({"signals": {**signals, "error_rate": 0.001}}), rules, SLO())
    assert warned.healthy and warned.warnings == 1 and warned.summary == "healthy, with 1 warning"
    assert warned.top_severity == "warning" and warned.checks[0].id == "queueing"


def test_a_quantile_inside_the_bucket_that_holds_the_slo_says_so():
    """vLLM's TTFT buckets jump from 1 to 2.5 s: against a 2 s SLO an interpolated p95 says little
    about which side of it the true p95 lies. Both the breach and the warning evidence say so."""
    from advisor.diagnosis.evaluate import straddle
    from advisor.diagnosis.expr import Value

    slo = Value(2.0, label="SLO ttft_p95", source="SLO")
    below = Value(1.8, unit="s", label="ttft_p95", bucket=(1.0, 2.5))
    note = straddle(below, slo)
    assert note == ("ttft_p95 was interpolated inside the 1.000 s -> 2.500 s bucket, which holds the SLO (2.000 s): "
                    "the SLO may already be broken; 33% of that bucket lies beyond the SLO")
    assert "may still hold" in straddle(Value(2.2, unit="s", label="ttft_p95", bucket=(1.0, 2.5)), slo)
    ratio = Value(0.9, unit="x", label="ttft_p95 / slo:ttft_p95", parts=[below, slo])
    assert straddle(ratio, Value(0.8, label="headroom", source="rule parameter")) == note
    assert straddle(Value(0.9, unit="s", label="ttft_p95", bucket=(0.75, 1.0)), slo) is None, "SLO outside"
    assert straddle(Value(1.8, unit="s", label="ttft_p95"), slo) is None, "not a quantile"
    snap = snapshot_for({"signals": {"ttft_p95": 1.8, "tpot_p95": 0.02, "requests_waiting_avg": 3}})
    snap.signals["ttft_p95"].bucket = (1.0, 2.5)
    d = diagnose(snap, [RULES["ADV001"]], SLO(ttft_p95=2.0))
    [f] = d.findings
    assert f.severity == "warning" and [e.bucket_note for e in f.evidence if e.bucket_note] == [note]
