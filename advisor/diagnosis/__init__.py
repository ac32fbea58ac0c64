"""Diagnosis: rules from the optimisation map evaluated against a snapshot and SLOs."""

from advisor.diagnosis.evaluate import diagnose
from advisor.diagnosis.model import Check, Diagnosis, Evidence, Finding, NotEvaluated
from advisor.diagnosis.rules import Rule, RuleError, load_overrides, load_rules, per_replica_signals
from advisor.diagnosis.slo import SLO, SLOError, load_slo

__all__ = ["SLO", "SLOError", "Check", "Diagnosis", "Evidence", "Finding", "NotEvaluated", "Rule", "RuleError",
           "diagnose", "load_overrides", "load_rules", "load_slo", "per_replica_signals"]
