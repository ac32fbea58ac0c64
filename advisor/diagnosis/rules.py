"""Rules: one YAML file each in rules/, loaded into typed objects with errors that name the file
and the field. A rule recognises one symptom and prescribes ranked checks, each naming exactly one
mechanism from the knob vocabulary."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, RootModel

from advisor.diagnosis.expr import Expr, RuleSyntaxError, parse_expr
from advisor.diagnosis.model import SEVERITY_ORDER
from advisor.diagnosis.slo import SLO
from advisor.errors import AdvisorError
from advisor.inputs import InputModel, field_error, load_yaml, suggest, unknown_key, validate
from advisor.knobs import DIRECTIONS, KNOBS
from advisor.resources import data_dir, read_yaml
from probes import signal_defs

OPS = {">": lambda a, b: a > b, ">=": lambda a, b: a >= b, "<": lambda a, b: a < b,
       "<=": lambda a, b: a <= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}
STAGES = ("supply_demand", "scheduling_memory", "compute_path")
LEVELS = [s for s in SEVERITY_ORDER if s not in ("none", "warning")]  # graded by severity thresholds


class RuleError(AdvisorError, ValueError):
    """A rule file is malformed: the message names the file and the field."""


@dataclass(frozen=True)
class Cond:
    kind: str  # all | any | not | cmp
    children: tuple["Cond", ...] = ()
    left: Expr | None = None
    op: str | None = None
    right: Expr | str | None = None


@dataclass
class CheckSpec:
    id: str
    title: str
    stage: str
    evidence: Expr
    strength: tuple[float, float]
    look_at: str
    directions: list[str]
    mechanism: str
    readout: str
    direction: str = "up"  # what the check prescribes for its mechanism: up, down, on or off
    if_missing: float | None = None  # strength ranked with when the evidence is missing (None: the default)


@dataclass
class Rule:
    id: str
    name: str
    symptom: str
    layer: str
    map_row: str
    params: dict[str, float]
    when: Cond
    severity_value: Expr
    thresholds: dict[str, float]
    checks: list[CheckSpec]
    docs: dict[str, Any]
    path: Path
    enabled: bool = True
    evidence_signals: set[str] = field(default_factory=set)
    # Headroom: near the SLO (warning_when) while the rule's mechanism dominates (warning_dominates),
    # a finding of severity "warning" before the breach.
    warning_when: Cond | None = None
    warning_dominates: Cond | None = None

    def exprs(self) -> list[Expr]:
        """Every expression the rule evaluates: its conditions, severity and check evidence."""
        out = [self.severity_value, *(c.evidence for c in self.checks)]
        conds = [c for c in (self.when, self.warning_when, self.warning_dominates) if c is not None]
        while conds:
            c = conds.pop()
            conds += c.children
            out += [e for e in (c.left, c.right) if isinstance(e, Expr)]
        return out


def per_replica_signals(rules: list[Rule]) -> set[str]:
    """What the enabled rules read replica by replica: all a diagnosis needs broken down."""
    return {name for r in rules if r.enabled for e in r.exprs() for name in e.per_replica()}


def _need(d: dict, key: str, where: str, kind: type | tuple = str) -> Any:
    if key not in d:
        raise RuleSyntaxError(f"{where}: missing required field {key!r}")
    v = d[key]
    if not isinstance(v, kind):
        want = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise RuleSyntaxError(f"{where}.{key}: expected {want}, got {type(v).__name__}")
    return v


def _cond(raw: Any, where: str, params: dict, slos: set[str]) -> Cond:
    if not isinstance(raw, dict):
        raise RuleSyntaxError(f"{where}: expected a condition mapping")
    if "all" in raw or "any" in raw:
        kind = "all" if "all" in raw else "any"
        items = _need(raw, kind, where, list)
        if not items:
            raise RuleSyntaxError(f"{where}.{kind}: must not be empty")
        return Cond(kind, tuple(_cond(c, f"{where}.{kind}[{i}]", params, slos) for i, c in enumerate(items)))
    if "not" in raw:
        return Cond("not", (_cond(raw["not"], f"{where}.not", params, slos),))
    left = parse_expr(_need(raw, "value", where, (dict, int, float)), f"{where}.value", params, slos)
    op = _need(raw, "op", where)
    if op not in OPS:
        raise RuleSyntaxError(f"{where}.op: unknown operator {op!r} (use {' '.join(OPS)})")
    than = raw.get("than")
    if than is None:
        raise RuleSyntaxError(f"{where}: missing required field 'than'")
    right = than if isinstance(than, str) else parse_expr(than, f"{where}.than", params, slos)
    if isinstance(right, str) and op not in ("==", "!="):
        raise RuleSyntaxError(f"{where}.op: a text value can only be compared with == or !=")
    return Cond("cmp", left=left, op=op, right=right)


def _check(raw: Any, where: str, params: dict, slos: set[str]) -> CheckSpec:
    if not isinstance(raw, dict):
        raise RuleSyntaxError(f"{where}: expected a mapping")
    stage = _need(raw, "stage", where)
    if stage not in STAGES:
        raise RuleSyntaxError(f"{where}.stage: {stage!r} is not one of {', '.join(STAGES)}")
    mech = _need(raw, "mechanism", where)
    if mech not in KNOBS:
        raise RuleSyntaxError(f"{where}.mechanism: unknown mechanism {mech!r} (known: {', '.join(KNOBS)})")
    readout = _need(raw, "readout", where)
    if readout not in signal_defs():
        raise RuleSyntaxError(f"{where}.readout: unknown signal {readout!r}")
    s = _need(raw, "strength", where, dict)
    lo, hi = _need(s, "low", f"{where}.strength", (int, float)), _need(s, "high", f"{where}.strength", (int, float))
    if lo == hi:
        raise RuleSyntaxError(f"{where}.strength: low and high must differ")
    unknown = set(s) - {"low", "high", "if_missing"}
    if unknown:
        raise RuleSyntaxError(f"{where}.strength: unknown key {sorted(unknown)[0]!r} (known: low, high, if_missing)")
    if_missing = s.get("if_missing")
    if if_missing is not None and (not _finite(if_missing) or not 0 <= if_missing <= 1):
        raise RuleSyntaxError(f"{where}.strength.if_missing: a number from 0 to 1, got {if_missing!r}")
    directions = _need(raw, "directions", where, list)
    if "direction" not in raw:
        raise RuleSyntaxError(f"{where}: missing required field 'direction' ({', '.join(DIRECTIONS)}: "
                              f"which way the check moves {mech})")
    direction = raw["direction"]
    if isinstance(direction, bool):  # YAML 1.1 reads a bare on/off as true/false
        direction = "on" if direction else "off"
    if direction not in DIRECTIONS:
        raise RuleSyntaxError(f"{where}.direction: unknown direction {direction!r} (known: {', '.join(DIRECTIONS)})")
    if direction not in KNOBS[mech].candidate.directions:
        raise RuleSyntaxError(f"{where}.direction: {mech} cannot go {direction!r} "
                              f"(the knob catalog has: {', '.join(KNOBS[mech].candidate.directions)})")
    return CheckSpec(
        id=_need(raw, "id", where), title=_need(raw, "title", where), stage=stage,
        evidence=parse_expr(_need(raw, "evidence", where, (dict, int, float)), f"{where}.evidence", params, slos),
        strength=(float(lo), float(hi)), look_at=_need(raw, "look_at", where),
        directions=[str(d) for d in directions], mechanism=mech, readout=readout, direction=direction,
        if_missing=None if if_missing is None else float(if_missing))


DOC_FIELDS = ("detects", "evidence", "change", "references")
OVERRIDE_KEYS = ("params", "severity", "enabled")


def _finite(v: Any) -> bool:
    """A number that can be compared: not a bool, not NaN, not an infinity."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _check_numbers(who: str, section: str, given: Any, known, what: str) -> None:
    """A mapping of known names to finite numbers (params, severity thresholds)."""
    given = given or {}
    if not isinstance(given, dict):
        raise RuleSyntaxError(f"{who}: {section} must be a mapping")
    for k, v in given.items():
        if k not in known:
            raise RuleSyntaxError(f"{who}: unknown {what} {k!r}{suggest(k, known)}")
        if not _finite(v):
            raise RuleSyntaxError(f"{who}: {section}.{k} must be a finite number, got {v!r}")


def _checked_override(override: Any, rid: Any, params: dict) -> dict:
    """An override given in code (load_overrides validates a file's before this): same checks."""
    who = f"override for {rid}"
    if override is None:
        return {}
    if not isinstance(override, dict):
        raise RuleSyntaxError(f"{who}: expected a mapping of params, severity, enabled")
    for k in override:
        if k not in OVERRIDE_KEYS:
            raise RuleSyntaxError(f"{who}: unknown key {k!r}{suggest(k, OVERRIDE_KEYS)}")
    if not isinstance(override.get("enabled", True), bool):
        raise RuleSyntaxError(f"{who}: enabled must be true or false, got {override['enabled']!r}")
    _check_numbers(who, "params", override.get("params"), params, "parameter")
    sev = override.get("severity") or {}
    if not isinstance(sev, dict) or any(k != "thresholds" for k in sev):
        raise RuleSyntaxError(f"{who}: severity takes only thresholds")
    _check_numbers(who, "severity.thresholds", sev.get("thresholds"), LEVELS, "severity level")
    return override


def parse_rule(raw: Any, path: Path, override: dict | None = None) -> Rule:
    where = path.name
    try:
        if not isinstance(raw, dict):
            raise RuleSyntaxError(f"{where}: expected a mapping at the top level")
        raw_params = raw.get("params") or {}
        if not isinstance(raw_params, dict):
            raise RuleSyntaxError(f"{where}.params: expected a mapping of names to numbers")
        for k, v in raw_params.items():
            if not _finite(v):
                raise RuleSyntaxError(f"{where}.params.{k}: expected a finite number, got {v!r}")
        params = {k: float(v) for k, v in raw_params.items()}
        override = _checked_override(override, raw.get("id"), params)
        for k, v in (override.get("params") or {}).items():
            params[k] = float(v)
        slos = set(SLO.model_fields)
        sev = _need(raw, "severity", where, dict)
        thresholds = {**_need(sev, "thresholds", f"{where}.severity", dict),
                      **((override.get("severity") or {}).get("thresholds") or {})}
        if set(thresholds) != set(LEVELS) or any(not _finite(v) for v in thresholds.values()):
            raise RuleSyntaxError(f"{where}.severity.thresholds: needs finite numbers for {', '.join(LEVELS)}")
        thresholds = {k: thresholds[k] for k in LEVELS}
        vals = list(thresholds.values())
        if vals != sorted(vals) and vals != sorted(vals, reverse=True):
            raise RuleSyntaxError(f"{where}.severity.thresholds: must be monotonic")
        docs = _need(raw, "docs", where, dict)
        for f in DOC_FIELDS:
            if not docs.get(f):
                raise RuleSyntaxError(f"{where}.docs.{f}: documentation is required")
        checks = [_check(c, f"{where}.checks[{i}]", params, slos)
                  for i, c in enumerate(_need(raw, "checks", where, list))]
        if not checks:
            raise RuleSyntaxError(f"{where}.checks: a rule needs at least one check")
        warning = raw.get("warning")
        if warning is not None:
            if not isinstance(warning, dict) or set(warning) != {"when", "dominates"}:
                raise RuleSyntaxError(f"{where}.warning: expected a mapping with when (near the SLO) and "
                                      "dominates (the rule's mechanism dominates)")
            docs_raw = raw.get("docs") if isinstance(raw.get("docs"), dict) else {}
            if not docs_raw.get("warning"):
                raise RuleSyntaxError(f"{where}.docs.warning: a rule with a warning documents when it warns")
            if "headroom" not in params:
                raise RuleSyntaxError(f"{where}.params: a rule with a warning needs a headroom parameter (0.8: "
                                      "warn at 80 % of the SLO)")
        rule = Rule(
            id=_need(raw, "id", where), name=_need(raw, "name", where), symptom=_need(raw, "symptom", where),
            layer=_need(raw, "layer", where), map_row=_need(raw, "map_row", where), params=params,
            when=_cond(_need(raw, "when", where, dict), f"{where}.when", params, slos),
            severity_value=parse_expr(_need(sev, "value", f"{where}.severity", (dict, int, float)),
                                      f"{where}.severity.value", params, slos),
            thresholds={k: float(v) for k, v in thresholds.items()}, checks=checks, docs=docs, path=path,
            enabled=override.get("enabled", True),
            warning_when=_cond(warning["when"], f"{where}.warning.when", params, slos) if warning else None,
            warning_dominates=(_cond(warning["dominates"], f"{where}.warning.dominates", params, slos)
                               if warning else None))
    except RuleSyntaxError as e:
        msg = str(e)
        if msg.startswith(where + "."):
            msg = f"{where}: {msg[len(where) + 1:]}"
        raise RuleError(msg) from None
    return rule


def load_rules(directory: Path | None = None, overrides: dict | None = None) -> list[Rule]:
    directory = directory or data_dir("rules")
    overrides = overrides or {}
    rules, seen = [], {}
    for path in sorted(directory.glob("*.yaml")):
        try:
            raw = read_yaml(path)
        except yaml.YAMLError as e:
            raise RuleError(f"{path.name}: not valid YAML: {str(e).splitlines()[0]}") from None
        rid = raw.get("id") if isinstance(raw, dict) else None
        rule = parse_rule(raw, path, overrides.get(rid))
        if rule.id in seen:
            raise RuleError(f"{path.name}: id {rule.id} is already used by {seen[rule.id]}")
        seen[rule.id] = path.name
        rules.append(rule)
    unknown = set(overrides) - set(seen)
    if unknown:
        raise RuleError(f"overrides name unknown rules: {', '.join(sorted(unknown))}")
    if not rules:
        raise RuleError(f"no rule files (*.yaml) in {directory}")
    return [r for r in rules if r.enabled]


class SeverityOverride(InputModel):
    thresholds: dict[str, float] = Field(default_factory=dict, description="severity level -> threshold")


class RuleOverride(InputModel):
    params: dict[str, float] = Field(default_factory=dict, description="parameter -> value, finite")
    severity: SeverityOverride | None = None
    enabled: bool = True


class Overrides(RootModel[dict[str, RuleOverride]]):
    pass


def _rule_catalog(directory: Path) -> dict[str, tuple[dict, dict]]:
    """id -> (params, severity thresholds) of the rule files, read as data (load_rules checks them)."""
    out = {}
    for path in sorted(directory.glob("*.yaml")):
        try:
            raw = read_yaml(path)
        except (OSError, ValueError, yaml.YAMLError):
            continue
        if isinstance(raw, dict) and isinstance(raw.get("id"), str):
            sev = raw.get("severity") if isinstance(raw.get("severity"), dict) else {}
            params = raw.get("params") if isinstance(raw.get("params"), dict) else {}
            th = sev.get("thresholds") if isinstance(sev.get("thresholds"), dict) else {}
            out[raw["id"]] = (params, th)
    return out


def load_overrides(path: Path, directory: Path | None = None) -> dict:
    """Per-rule overrides: {RULE_ID: {params: {...}, severity: {thresholds: {...}}, enabled: bool}}.

    Checked against the rules in `directory` (default: the shipped rules): the rule exists, each
    parameter is one of that rule's, each threshold names a severity level and keeps the levels in
    order; values are finite numbers and `enabled` a real boolean. Errors name the file and field."""
    data, node = load_yaml(path, RuleError)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise RuleError(f"{path}: expected a mapping of rule ids to overrides")
    parsed = validate(Overrides, data, path, RuleError, node).root
    catalog = _rule_catalog(directory or data_dir("rules"))
    for rid, o in parsed.items():
        if rid not in catalog:
            raise RuleError(field_error(path, (rid,), unknown_key(rid, sorted(catalog), "rule"), node))
        params, thresholds = catalog[rid]
        for name in o.params:
            if name not in params:
                problem = unknown_key(name, list(params), f"parameter of {rid}") if params else \
                    f"unknown parameter: {rid} has none"
                raise RuleError(field_error(path, (rid, "params", name), problem, node))
        if o.severity:
            for level in o.severity.thresholds:
                if level not in LEVELS:
                    raise RuleError(field_error(path, (rid, "severity", "thresholds", level),
                                                unknown_key(level, LEVELS, "severity level"), node))
            merged = {**thresholds, **o.severity.thresholds}
            vals = [merged.get(k) for k in LEVELS]
            if all(_finite(v) for v in vals) and vals != sorted(vals) and vals != sorted(vals, reverse=True):
                shown = ", ".join(f"{k} {merged[k]:g}" for k in LEVELS)
                raise RuleError(field_error(path, (rid, "severity", "thresholds"),
                                            f"the levels must stay in order ({shown})", node))
    return {rid: o.model_dump(exclude_unset=True) for rid, o in parsed.items()}
