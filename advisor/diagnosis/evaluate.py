"""Rules evaluated against a snapshot and SLOs: findings with evidence, then checks ranked."""

from __future__ import annotations

from dataclasses import dataclass

from advisor.diagnosis.expr import Bindings, Expr, Value
from advisor.diagnosis.model import Check, Diagnosis, Evidence, Finding, NotEvaluated
from advisor.diagnosis.ranking import rank
from advisor.diagnosis.rules import OPS, Cond, Rule
from advisor.diagnosis.slo import SLO
from advisor.models.served import kv_capacity_tokens
from advisor.models.structure import ModelStructure
from advisor.units import fmt
from advisor.workload.tokenize_cost import TokenizationCost
from probes import Snapshot


@dataclass
class ConditionResult:
    """Whether one condition of a rule holds, with the evidence read for it."""
    holds: bool | None  # None: could not tell (a value was missing)
    evidence: list[Evidence]
    missing: list[str]


def _show(v: Value) -> str:
    if v.value is None:
        return "missing"
    if isinstance(v.value, str):
        return v.value
    return fmt(v.value, v.unit) if v.unit else f"{v.value:g}"


def straddle(left: Value, right: Value | None) -> str | None:
    """When a quantile compared with its SLO was interpolated inside a histogram bucket that holds
    the SLO, what that means: the true quantile may lie on either side (a 2 s SLO inside vLLM's
    1 -> 2.5 s bucket). Also for a ratio to the SLO (the warning level)."""
    quantile = next((v for v in (left, *left.parts) if v.bucket), None)
    slo = next((v for v in (right, *left.parts) if v is not None and v.source == "SLO"), None)
    if quantile is None or slo is None or not isinstance(slo.value, (int, float)):
        return None
    lo, hi = quantile.bucket
    if not lo < slo.value < hi:
        return None
    beyond = (hi - slo.value) / (hi - lo)
    side = ("the SLO may already be broken" if quantile.value is not None and quantile.value <= slo.value
            else "the SLO may still hold")
    return (f"{quantile.label} was interpolated inside the {fmt(lo, quantile.unit)} -> {fmt(hi, quantile.unit)} "
            f"bucket, which holds the SLO ({fmt(slo.value, quantile.unit)}): {side}; {beyond:.0%} of that bucket "
            "lies beyond the SLO")


def _evidence(left: Value, op: str | None, right: Value | None) -> Evidence:
    threshold = None if right is None else right.value
    text = f"{left.label} = {_show(left)}"
    note = straddle(left, right) if op else None
    if op and right is not None:
        # SLOs and parameters are written in the unit of the signal they are compared with.
        if not right.unit and right.source in ("SLO", "rule parameter") and isinstance(right.value, float):
            right = Value(right.value, unit=left.unit, label=right.label, source=right.source)
        text += f" {op} {right.label} ({_show(right)})"
    if note:
        text += f" ({note})"
    return Evidence(signal=left.label, value=left.value, unit=left.unit, op=op, threshold=threshold,
                    threshold_from=None if right is None else right.label, source=left.source, text=text,
                    bucket_note=note)


def check_cond(cond: Cond, ctx: Bindings) -> ConditionResult:
    if cond.kind == "cmp":
        left = cond.left.evaluate(ctx)
        right = Value(cond.right, label=repr(cond.right)) if isinstance(cond.right, str) else cond.right.evaluate(ctx)
        missing = [f"{v.label}: {v.missing}" for v in (left, right) if v.value is None]
        if missing:
            return ConditionResult(None, [], missing)
        if isinstance(left.value, str) != isinstance(right.value, str):
            return ConditionResult(None, [], [f"{left.label}: cannot compare {left.value!r} with {right.value!r}"])
        holds = OPS[cond.op](left.value, right.value)
        return ConditionResult(holds, [_evidence(left, cond.op, right)], [])
    parts = [check_cond(c, ctx) for c in cond.children]
    # Under `any`, only the branches that held are evidence for the finding.
    ev = [e for p in parts if cond.kind != "any" or p.holds for e in p.evidence]
    miss = [m for p in parts for m in p.missing]
    if cond.kind == "not":
        h = parts[0].holds
        return ConditionResult(None if h is None else not h, ev, miss)
    states = [p.holds for p in parts]
    if cond.kind == "all":
        holds = False if False in states else (None if None in states else True)
    else:
        holds = True if True in states else (None if None in states else False)
    return ConditionResult(holds, ev, miss)


def severity(rule: Rule, ctx: Bindings) -> tuple[str, float | None]:
    v = rule.severity_value.evaluate(ctx).value
    if not isinstance(v, (int, float)):
        return "low", None
    levels = list(rule.thresholds.items())
    ascending = levels[-1][1] >= levels[0][1]
    level = "low"
    for name, t in levels:
        if (v >= t) if ascending else (v <= t):
            level = name
    return level, float(v)


def _strength(expr: Expr, lo_hi: tuple[float, float], ctx: Bindings) -> tuple[float | None, Value]:
    v = expr.evaluate(ctx)
    if not isinstance(v.value, (int, float)):
        return None, v
    lo, hi = lo_hi
    return max(0.0, min(1.0, (v.value - lo) / (hi - lo))), v


def warning(rule: Rule, ctx: Bindings) -> ConditionResult | None:
    """Near the SLO with the rule's mechanism dominating: the evidence of both, or None. A warning
    that cannot be told (a value missing) is no warning: only the breach says 'not evaluated'."""
    if rule.warning_when is None or rule.warning_dominates is None:
        return None
    near, dominates = check_cond(rule.warning_when, ctx), check_cond(rule.warning_dominates, ctx)
    if near.holds and dominates.holds:
        return ConditionResult(True, near.evidence + dominates.evidence, [])
    return None


def evaluate_rule(rule: Rule, ctx: Bindings) -> Finding | NotEvaluated | None:
    out = check_cond(rule.when, ctx)
    if out.holds is None:
        return NotEvaluated(rule_id=rule.id, reason="; ".join(dict.fromkeys(out.missing)))
    if not out.holds:
        out = warning(rule, ctx)
        if out is None:
            return None
        level, sev_value = "warning", severity(rule, ctx)[1]
    else:
        level, sev_value = severity(rule, ctx)
    checks = []
    for spec in rule.checks:
        strength, v = _strength(spec.evidence, spec.strength, ctx)
        ev = [_evidence(v, None, None)] if v.value is not None else []
        ev += [_evidence(p, None, None) for p in v.parts if p.value is not None and p.label != v.label]
        checks.append(Check(
            id=spec.id, rule_id=rule.id, title=spec.title, stage=spec.stage, mechanism=spec.mechanism,
            readout=spec.readout, score=0.0, strength=strength, strength_if_missing=spec.if_missing,
            reason="" if strength is not None else f"evidence missing ({v.missing})",
            look_at=spec.look_at, directions=spec.directions, direction=spec.direction, evidence=ev))
    return Finding(rule_id=rule.id, name=rule.name, symptom=rule.symptom, layer=rule.layer,
                   map_row=rule.map_row, severity=level, severity_value=sev_value,
                   evidence=out.evidence, checks=checks)


def model_facts(structure: ModelStructure | None, config: dict) -> dict[str, float | None] | None:
    """The rules' facts about the served model: KV bytes per token at the engine's KV cache dtype
    (vLLM's cache_config_info cache_dtype; auto: the model's), the GQA ratio, routed experts."""
    if structure is None:
        return None
    return {"kv_bytes_per_token": structure.kv_bytes_per_token(str(config.get("cache_dtype") or "auto")),
            "gqa_ratio": structure.gqa_ratio, "experts": float(structure.experts) if structure.experts else 0.0}


def measured_facts(tokenization: TokenizationCost | None, note: str | None) -> dict[str, Value]:
    """What was timed on the target, as the rules read it: each value with what was timed, or why not."""
    if tokenization is None:
        return {"tokenization_share": Value(None, f"tokenization was not measured: {note or 'not asked'}", "ratio",
                                            "tokenization_share")}
    why = None if tokenization.share is not None else "the deployment's mean TTFT was not measured"
    return {"tokenization_share": Value(tokenization.share, why, "ratio", "tokenization_share",
                                        f"{tokenization.endpoint} at the mean prompt length, over ttft_mean")}


def diagnose(snapshot: Snapshot, rules: list[Rule], slo: SLO, model: ModelStructure | None = None,
             model_note: str | None = None, tokenization: TokenizationCost | None = None,
             tokenization_note: str | None = None) -> Diagnosis:
    """model: the served model's structure (advisor.models.served_structure); model_note: why it
    is not known. tokenization: the target's /tokenize timed (advisor.workload.tokenize_cost);
    tokenization_note: why it was not."""
    slo_values = slo.model_dump()
    findings, skipped = [], []
    facts = model_facts(model, snapshot.engine.config)
    missing = f"the served model's structure is not known: {model_note}" if model_note else \
        "the served model's structure is not known"
    measured = measured_facts(tokenization, tokenization_note)
    for rule in rules:
        result = evaluate_rule(rule, Bindings(snapshot, slo_values, rule.params, facts, missing, measured))
        if isinstance(result, Finding):
            findings.append(result)
        elif isinstance(result, NotEvaluated):
            skipped.append(result)
    diag = Diagnosis(target=snapshot.target, via=snapshot.via, taken_at=snapshot.taken_at,
                     window_s=snapshot.window_s, model=snapshot.model, engine=snapshot.engine,
                     slo=slo_values, findings=findings, not_evaluated=skipped,
                     problems=snapshot.problems, queries=snapshot.queries, model_structure=model,
                     model_note=model_note, kv_bytes_per_token=(facts or {}).get("kv_bytes_per_token"),
                     kv_capacity_tokens=kv_capacity_tokens(snapshot.engine.config),
                     tokenization=tokenization, tokenization_note=tokenization_note)
    rank(diag, snapshot)
    return diag
