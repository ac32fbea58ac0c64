"""What a diagnosis says: findings (a recognised symptom) with evidence and ranked checks."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from advisor.cost import CostFigures
from advisor.models.structure import ModelStructure
from advisor.verdict import ExperimentKey, Verdict
from advisor.workload.tokenize_cost import TokenizationCost
from probes import EngineInfo

# "warning": the signal is near its SLO (at the rule's headroom, 80 % by default) and the mechanism
# the rule names already dominates; the SLO still holds. Below every breach.
Severity = Literal["none", "warning", "low", "moderate", "severe", "critical"]
SEVERITY_ORDER: dict[str, int] = {"none": 0, "warning": 1, "low": 2, "moderate": 3, "severe": 4, "critical": 5}
Stage = Literal["supply_demand", "scheduling_memory", "compute_path"]


class Evidence(BaseModel):
    """One line of proof: a measured value against what it was compared with."""

    signal: str
    value: float | str | None
    unit: str = ""
    op: str | None = None
    threshold: float | str | None = None
    threshold_from: str | None = Field(default=None, description="slo:NAME, param:NAME or signal:NAME")
    source: str = ""
    text: str
    bucket_note: str | None = Field(default=None, description="the quantile lies in a histogram bucket that "
                                    "holds its SLO: which side it is really on cannot be told")


class ExperimentRef(BaseModel):
    """The experiment that tested a check: its stored result by key (every view reads that one
    result), and its verdict, for a listing that has no store at hand."""

    experiment: ExperimentKey
    verdict: Verdict


class CheckSkip(BaseModel):
    """Why a check was not tested."""

    skipped: str


class Check(BaseModel):
    rank: int = 0
    id: str
    rule_id: str
    title: str
    stage: Stage
    mechanism: str
    readout: str
    score: float
    strength: float | None
    strength_if_missing: float | None = Field(default=None, description="the strength ranked with when the "
                                              "evidence is missing (the rule's; else the ranking's default)")
    reason: str
    held_back: bool = False
    already: str | None = Field(default=None, description="the mechanism is already in its candidate state")
    look_at: str
    directions: list[str]
    direction: Literal["up", "down", "on", "off"] | None = Field(
        default=None, description="which way the check moves its mechanism; the experiment's candidate follows it")
    evidence: list[Evidence] = []
    verdict: ExperimentRef | CheckSkip | None = Field(
        default=None, description="the experiment that tested it, or why the check was not tested (skipped)")


class Finding(BaseModel):
    rule_id: str
    name: str
    symptom: str
    layer: str
    map_row: str
    severity: Severity
    severity_value: float | None = None
    evidence: list[Evidence]
    checks: list[Check]


class NotEvaluated(BaseModel):
    rule_id: str
    reason: str


class Trigger(BaseModel):
    """What started a diagnosis other than a person or the schedule: an Alertmanager notification."""
    source: str = Field(description="alertmanager")
    alerts: list[str] = Field(default_factory=list, description="the firing alerts' names")
    group_key: str = Field(default="", description="Alertmanager's group key")
    url: str | None = Field(default=None, description="the alert, where Alertmanager's externalURL is known")


class Diagnosis(BaseModel):
    target: str
    via: str
    taken_at: datetime
    window_s: float
    model: str | None = None
    engine: EngineInfo
    slo: dict[str, float | None]
    findings: list[Finding] = []
    not_evaluated: list[NotEvaluated] = []
    problems: list[str] = []
    queries: int = 0
    model_structure: ModelStructure | None = Field(default=None, description="the served model's config.json")
    model_note: str | None = Field(default=None, description="why the model's structure is not known")
    kv_bytes_per_token: int | None = Field(default=None, description="at the engine's KV cache dtype")
    kv_capacity_tokens: int | None = Field(default=None, description="the KV cache's size, as the engine reports it")
    tokenization: TokenizationCost | None = Field(default=None, description="the target's /tokenize, timed at the "
                                                  "deployment's prompt lengths")
    tokenization_note: str | None = Field(default=None, description="why tokenization was not measured")
    cost: CostFigures | None = Field(default=None, description="$ per million output tokens and per thousand "
                                     "SLO-meeting requests over the window (advisor/cost.py)")
    cost_note: str | None = Field(default=None, description="why no cost is shown")
    trigger: Trigger | None = Field(default=None, description="the alert that started it, if one did")

    @property
    def healthy(self) -> bool:
        """Every SLO holds: no finding, or warnings only."""
        return all(f.severity == "warning" for f in self.findings)

    @property
    def warnings(self) -> int:
        return sum(f.severity == "warning" for f in self.findings)

    @property
    def summary(self) -> str:
        """One line a script can read: "healthy", "healthy, with 2 warnings", or the symptoms."""
        w = self.warnings
        warned = f", with {w} warning{'s' if w != 1 else ''}" if w else ""
        if self.healthy:
            return "healthy" + warned
        n = len(self.findings) - w
        return f"{n} symptom{'s' if n != 1 else ''}, worst {self.top_severity}" + warned

    @property
    def checks(self) -> list[Check]:
        return sorted((c for f in self.findings for c in f.checks), key=lambda c: c.rank)

    @property
    def top_severity(self) -> Severity:
        return max((f.severity for f in self.findings), key=SEVERITY_ORDER.__getitem__, default="none")
