"""Malformed rules, overrides and SLO files: a clear error naming the file and the field."""

import shutil
from pathlib import Path

import pytest
import yaml

from advisor.diagnosis import RuleError, SLOError, load_overrides, load_rules, load_slo
from advisor.resources import data_dir

GOOD = data_dir("rules") / "ADV001-ttft-high-tpot-normal.yaml"


def write_rule(tmp_path: Path, mutate) -> Path:
    raw = yaml.safe_load(GOOD.read_text())
    mutate(raw)
    (tmp_path / "ADV001-test.yaml").write_text(yaml.safe_dump(raw))
    return tmp_path


@pytest.mark.parametrize("mutate, message", [
    (lambda r: r["when"]["all"][0]["value"].update(signal="ttft_p955"), r"ADV001-test.yaml: .*when.all\[0\].value: unknown signal 'ttft_p955'"),
    (lambda r: r["checks"][0].update(mechanism="magic"), r"checks\[0\].mechanism: unknown mechanism 'magic'"),
    (lambda r: r["checks"][0].pop("stage"), r"checks\[0\]: missing required field 'stage'"),
    (lambda r: r["checks"][1].update(stage="later"), r"checks\[1\].stage: 'later' is not one of"),
    (lambda r: r["docs"].update(change=""), r"docs.change: documentation is required"),
    (lambda r: r["when"]["all"][0].update(op="=~"), r"when.all\[0\].op: unknown operator"),
    (lambda r: r["severity"].update(thresholds={"low": 1, "severe": 2}), r"severity.thresholds: needs finite numbers"),
    (lambda r: r["when"]["all"][0]["than"].update(slo="ttft_p50"), r"unknown SLO 'ttft_p50'"),
    (lambda r: r["checks"][0].update(readout="speed"), r"readout: unknown signal 'speed'"),
    (lambda r: r.update(checks=[]), r"checks: a rule needs at least one check"),
    (lambda r: r["checks"][0]["strength"].update(low=1, high=1), r"strength: low and high must differ"),
    (lambda r: r["checks"][0]["strength"].update(if_missing=2), r"strength.if_missing: a number from 0 to 1, got 2"),
    (lambda r: r["checks"][0]["strength"].update(mid=0.5), r"strength: unknown key 'mid'"),
])
def test_malformed_rule_names_file_and_field(tmp_path, mutate, message):
    with pytest.raises(RuleError, match=message):
        load_rules(write_rule(tmp_path, mutate))


def test_rule_text_is_never_evaluated(tmp_path):
    with pytest.raises(RuleError, match="value: expected dict/int/float, got str"):
        load_rules(write_rule(tmp_path, lambda r: r["when"]["all"][0].update(value="__import__('os')")))


def test_invalid_yaml(tmp_path):
    (tmp_path / "ADV999-bad.yaml").write_text("id: [unclosed\n")
    with pytest.raises(RuleError, match="ADV999-bad.yaml: not valid YAML"):
        load_rules(tmp_path)


def test_duplicate_ids(tmp_path):
    shutil.copy(GOOD, tmp_path / "a.yaml")
    shutil.copy(GOOD, tmp_path / "b.yaml")
    with pytest.raises(RuleError, match="b.yaml: id ADV001 is already used by a.yaml"):
        load_rules(tmp_path)


def test_empty_rules_dir(tmp_path):
    with pytest.raises(RuleError, match="no rule files"):
        load_rules(tmp_path)


def test_overrides_change_thresholds_and_disable():
    rules = {r.id: r for r in load_rules(overrides={"ADV007": {"params": {"max_preemptions": 5}},
                                                    "ADV009": {"enabled": False}})}
    assert rules["ADV007"].params["max_preemptions"] == 5
    assert "ADV009" not in rules


def test_override_of_unknown_rule_or_param():
    with pytest.raises(RuleError, match="unknown rules: ADV404"):
        load_rules(overrides={"ADV404": {}})
    with pytest.raises(RuleError, match="unknown parameter 'nope'"):
        load_rules(overrides={"ADV007": {"params": {"nope": 1}}})


def test_overrides_file(tmp_path):
    p = tmp_path / "o.yaml"
    p.write_text("ADV007: {params: {max_preemptions: 2}}\n")
    assert load_overrides(p) == {"ADV007": {"params": {"max_preemptions": 2}}}
    p.write_text("- not a mapping\n")
    with pytest.raises(RuleError, match="expected a mapping"):
        load_overrides(p)


def test_slo_defaults_and_file(tmp_path):
    assert load_slo(None).ttft_p95 == 1.0
    p = tmp_path / "slo.yaml"
    p.write_text("ttft_p95: 0.5\ntpot_p95: 0.05\n")
    assert load_slo(p).ttft_p95 == 0.5


@pytest.mark.parametrize("text, message", [
    ("ttft_p95: fast\n", "field ttft_p95"),
    ("ttft_p95: -1\n", "field ttft_p95"),
    ("ttft_p59: 1\n", "field ttft_p59: unknown key \\(did you mean 'ttft_p95'\\?\\)"),
    ("[1, 2]\n", "expected a mapping"),
    ("a: [\n", "not valid YAML"),
])
def test_bad_slo_file(tmp_path, text, message):
    p = tmp_path / "slo.yaml"
    p.write_text(text)
    with pytest.raises(SLOError, match=message):
        load_slo(p)


def test_missing_slo_file(tmp_path):
    with pytest.raises(SLOError, match="cannot read"):
        load_slo(tmp_path / "nope.yaml")


@pytest.mark.parametrize("override, message", [
    ({"enabled": "false"}, "enabled must be true or false, got 'false'"),
    ({"severity": {"thresholds": {"critical": float("nan")}}}, "severity.thresholds.critical must be a finite number"),
    ({"severity": {"thresholds": {"low": float("inf")}}}, "severity.thresholds.low must be a finite number"),
    ({"params": {"max_preemptions": "lots"}}, "params.max_preemptions must be a finite number"),
    ({"params": {"max_preemptions": True}}, "params.max_preemptions must be a finite number"),
    ({"params": {"max_preemtions": 2}}, "unknown parameter 'max_preemtions' (did you mean 'max_preemptions'?)"),
    ({"enabeld": False}, "unknown key 'enabeld' (did you mean 'enabled'?)"),
    ("off", "expected a mapping"),
])
def test_overrides_given_in_code_are_checked_too(override, message):
    # load_overrides checks a file first; overrides built in code get the same refusals, never a
    # rule left on by "false" or graded by a NaN threshold.
    with pytest.raises(RuleError) as e:
        load_rules(overrides={"ADV007": override})
    assert message in str(e.value)


def test_a_nan_threshold_in_a_rule_file_is_refused(tmp_path):
    with pytest.raises(RuleError, match="severity.thresholds: needs finite numbers"):
        load_rules(write_rule(tmp_path, lambda r: r["severity"]["thresholds"].update(critical=float("nan"))))
