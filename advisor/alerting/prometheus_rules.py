"""rules/*.yaml as a Prometheus rule file: per dialect, one group holding a recording rule for every
signal the rules read and an alerting rule for every rule's breach and warning level.

A rule's condition is compiled, not re-written by hand, from the same parsed objects the advisor
evaluates (advisor.diagnosis.rules.Cond): a comparison becomes a PromQL filter, `all` an `and`,
`any` an `or`. The advisor's three values carry over: a signal that is missing is an absent
series, which neither fires an `and` nor blocks an `or`'s other branch, as a missing value makes
the advisor's `all` undecided and leaves its `any` to the other branches. What is known when the
file is written (an SLO, a rule parameter) is folded in as a number; an SLO that is not set makes
the comparison undecided, so a level that needs it is left out (said in the file's comments).

What PromQL alone cannot express is listed in a comment, never approximated: an engine flag read
from its configuration, a fact of the model file, a spread across replicas, a negation (absent is
not false). Two differences from the advisor remain, both stated in the file's header: a warning
is suppressed only where the breach fires (the advisor also withholds it when the breach cannot be
evaluated), and the values the advisor refuses as impossible (negative counters, gauges past their
ceiling) are not filtered here.

Every series is aggregated over what the dialect's selectors match, as `advisor diagnose
--prom-url` without --model does: point the file at a Prometheus (or a rule group's selector
through --model) that holds one deployment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from advisor.diagnosis.expr import Expr
from advisor.diagnosis.rules import OPS, Cond, Rule
from probes.catalog import GPU_DIALECT, Dialect
from probes.promql import signal_queries

FLIPPED = {">": "<", ">=": "<=", "<": ">", "<=": ">=", "==": "==", "!=": "!="}


class NotExpressible(Exception):
    """A part of a condition that PromQL alone cannot read; its text says what."""


@dataclass(frozen=True)
class _Known:
    """A comparison's outcome decided when the file is written (numbers on both sides), or an
    undecided one (an SLO not set): None."""
    holds: bool | None


@dataclass
class Level:
    rule: Rule
    level: str  # "breach" | "warning"
    expr: str | None  # None: not exported, `why` says why
    why: str | None = None


@dataclass
class DialectRules:
    dialect: str
    records: dict[str, str]  # record name -> expression
    levels: list[Level] = field(default_factory=list)


def record_name(dialect: str, signal: str) -> str:
    return f"advisor:{dialect}:{signal}"


def _number(v: float) -> str:
    return repr(float(v)) if math.isfinite(v) else ("+Inf" if v > 0 else "-Inf")


def _value(e: Expr, dialect: str, signals: set[str], slo: dict, params: dict) -> str | float | None:
    """A vector expression (str), a number, or None (undecided: an SLO not set, a signal the dialect
    does not map)."""
    if e.kind == "const":
        return float(e.arg)
    if e.kind == "param":
        return float(params[e.arg])
    if e.kind == "slo":
        v = slo.get(e.arg)
        return None if v is None else float(v)
    if e.kind == "signal":  # one the dialect does not map is missing, as on a target that does not export it
        return record_name(dialect, e.arg) if e.arg in signals else None
    if e.kind == "ratio":
        a, b = (_value(x, dialect, signals, slo, params) for x in e.arg)
        if a is None or b is None:
            return None
        if isinstance(a, float) and isinstance(b, float):
            return a / b if b else None
        return f"({_operand(a)} / {_operand(b)})"
    what = {"config": "an engine flag from its configuration", "fact": "a fact of the served model or host",
            "spread": "a spread across replicas"}.get(e.kind, e.kind)
    raise NotExpressible(f"{e.label()}: {what}")


def _operand(v: str | float) -> str:
    return _number(v) if isinstance(v, float) else v


def compile_cond(c: Cond, dialect: str, signals: set[str], slo: dict, params: dict) -> str | _Known:
    """A PromQL expression that returns series exactly when the condition holds, or the outcome
    when it is decided without data."""
    if c.kind == "cmp":
        if isinstance(c.right, str):
            raise NotExpressible(f"{c.left.label()} {c.op} {c.right!r}: a comparison with text")
        left = _value(c.left, dialect, signals, slo, params)
        right = _value(c.right, dialect, signals, slo, params)
        if left is None or right is None:
            return _Known(None)
        if isinstance(left, float) and isinstance(right, float):
            return _Known(bool(OPS[c.op](left, right)))
        if isinstance(left, float):  # a number on the left: the vector's side carries the value shown
            left, right, op = right, left, FLIPPED[c.op]
        else:
            op = c.op
        return f"{left} {op} {_operand(right)}"
    if c.kind == "not":
        raise NotExpressible("a negation (an absent series is not a false one)")
    parts = [compile_cond(x, dialect, signals, slo, params) for x in c.children]
    if c.kind == "all":
        if any(isinstance(p, _Known) and p.holds is False for p in parts):
            return _Known(False)
        if any(isinstance(p, _Known) and p.holds is None for p in parts):
            return _Known(None)
        exprs = [p for p in parts if isinstance(p, str)]
        return " and ".join(f"({p})" for p in exprs) if exprs else _Known(True)
    # any: a decided true branch decides it; undecided and false branches add nothing
    if any(isinstance(p, _Known) and p.holds for p in parts):
        return _Known(True)
    exprs = [p for p in parts if isinstance(p, str)]
    if exprs:
        return " or ".join(f"({p})" for p in exprs)
    return _Known(None if any(isinstance(p, _Known) and p.holds is None for p in parts) else False)


def _level_expr(cond: Cond, dialect: str, signals: set[str], slo: dict, params: dict) -> tuple[str | None, str | None]:
    try:
        out = compile_cond(cond, dialect, signals, slo, params)
    except NotExpressible as e:
        return None, f"PromQL alone cannot read {e}"
    if isinstance(out, _Known):
        return None, ("an SLO it compares with is not set, or a signal it needs is not in this dialect"
                      if out.holds is None
                      else "it holds whatever the data" if out.holds else "it cannot hold with these SLOs")
    return out, None


def compile_dialect(dialect: Dialect, gpu: Dialect | None, rules: list[Rule], slo: dict, window_s: float,
                    model: str | None = None) -> DialectRules:
    name = dialect.engine
    queries = signal_queries(dialect, window_s, model)
    if gpu is not None:  # GPU signals come from DCGM beside any engine; recorded under this dialect's names
        queries.update({k: v for k, v in signal_queries(gpu, window_s).items() if k not in queries})
    read = {s for r in rules for e in r.exprs() for s in e.signals()}
    records = {record_name(name, s): queries[s] for s in sorted(read) if s in queries}
    signals = {s for s in read if s in queries}
    out = DialectRules(name, records)
    for rule in rules:
        if not rule.enabled:
            continue
        expr, why = _level_expr(rule.when, name, signals, slo, rule.params)
        out.levels.append(Level(rule, "breach", expr, why))
        if rule.warning_when is None or rule.warning_dominates is None:
            continue
        near, why_near = _level_expr(rule.warning_when, name, signals, slo, rule.params)
        dominates, why_dom = _level_expr(rule.warning_dominates, name, signals, slo, rule.params)
        if near is None or dominates is None:
            out.levels.append(Level(rule, "warning", None, why_near or why_dom))
            continue
        warn = f"({near}) and ({dominates})"
        if expr is not None:
            warn = f"({warn}) unless on() ({expr})"
        out.levels.append(Level(rule, "warning", warn))
    return out


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}h" if s and s % 3600 == 0 else f"{s // 60}m" if s and s % 60 == 0 else f"{s}s"


def _template_safe(text: str) -> str:
    """Annotations are Go templates: the rule base's own text must not be read as one."""
    return text.replace("{{", "{ {").replace("}}", "} }")


def groups(compiled: list[DialectRules], *, breach_for_s: float, warning_for_s: float,
           dashboard_url: str | None, labels: dict[str, str] | None = None) -> list[dict]:
    """labels: added to every alert (deployment=NAME: the advisor.yaml deployment Alertmanager's
    webhook into `advisor serve` diagnoses)."""
    out = []
    for d in compiled:
        rules: list[dict] = [{"record": k, "expr": v} for k, v in d.records.items()]
        for lv in d.levels:
            if lv.expr is None:
                continue
            r = lv.rule
            first = r.checks[0] if r.checks else None
            summary = _template_safe(f"{r.id} {r.symptom}" + (" (near its SLO, the mechanism already dominating)"
                                                              if lv.level == "warning" else ""))
            ann = {"summary": summary + ": {{ $value | humanize }}", "map_row": _template_safe(r.map_row)}
            if first is not None:
                ann["first_check"] = _template_safe(f"{first.title}; look at {first.look_at}")
            if dashboard_url:
                ann["runbook_url"] = f"{dashboard_url.rstrip('/')}/rules/{r.id}"
            rules.append({"alert": f"{r.id}{'Warning' if lv.level == 'warning' else ''}",
                          "expr": lv.expr,
                          "for": _duration(warning_for_s if lv.level == "warning" else breach_for_s),
                          "labels": {**(labels or {}),
                                     "severity": "warning" if lv.level == "warning" else "critical",
                                     "rule": r.id, "layer": r.layer, "dialect": d.dialect,
                                     "advisor_level": lv.level},
                          "annotations": ann})
        out.append({"name": f"llm-advisor-{d.dialect}", "rules": rules})
    return out


def header(compiled: list[DialectRules], slo: dict, window_s: float) -> str:
    lines = ["Written by `advisor rules export` from rules/*.yaml, the SLO file and the metric dialects.",
             f"Window {_duration(window_s)}; SLOs: " + ", ".join(f"{k} {v:g}" for k, v in slo.items() if v is not None)
             + ".",
             "Every series is aggregated over what the dialect's metric names match: one deployment per",
             "Prometheus (or per --model). A warning is withheld where its breach fires; the advisor also",
             "withholds it where the breach cannot be evaluated. Impossible values (negative counters) are not",
             "filtered here as the advisor filters them.",
             "",
             "Not exported (PromQL alone cannot express them, or the SLOs make them moot):"]
    skipped = [(d.dialect, lv) for d in compiled for lv in d.levels if lv.expr is None]
    seen = set()
    for dialect, lv in skipped:
        key = (lv.rule.id, lv.level, lv.why)
        if key in seen:
            continue
        seen.add(key)
        where = [d for d, x in skipped if (x.rule.id, x.level, x.why) == key]
        lines.append(f"  {lv.rule.id} {lv.level} ({', '.join(where)}): {lv.why}")
    if not skipped:
        lines.append("  none")
    return "\n".join(f"# {x}".rstrip() for x in lines) + "\n"


def engine_dialects_named(all_dialects: dict[str, Dialect], wanted: str) -> list[Dialect]:
    engines = {k: v for k, v in all_dialects.items() if k != GPU_DIALECT}
    if wanted in ("auto", "all"):
        return list(engines.values())
    if wanted not in engines:
        raise KeyError(wanted)
    return [engines[wanted]]
