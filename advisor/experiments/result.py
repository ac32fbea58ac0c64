"""What an experiment reports: the verdict on its primary metric with the interval, every other
metric's result, the quality guard where numerics change, and the manifest."""

from __future__ import annotations

from pydantic import BaseModel, Field

from advisor.experiments.stats import MetricResult


class BlockRecord(BaseModel):
    arm: str
    block: int
    requests: int
    ok: int
    errors: int
    ttft_p50: float | None
    tpot_p50: float | None
    e2e_p95: float | None
    generator_valid: bool
    run_id: int | None = None


class QualityGuard(BaseModel):
    prompts: int
    exact_match: float = Field(description="share of prompts whose greedy outputs are identical")
    token_agreement: float = Field(description="share of output positions with the same token")
    note: str


class ExperimentResult(BaseModel):
    id: str
    deployment: str
    mechanism: str
    value: str
    status: str = Field(description="finished | aborted | dry-run")
    verdict: str
    primary_metric: str
    ratio: float | None
    ci: tuple[float, float] | None
    metrics: list[MetricResult] = []
    blocks: list[BlockRecord] = []
    quality: QualityGuard | None = None
    aborted: str | None = None
    baseline_restored: bool | None = None
    restore_note: str | None = None
    fails_means: str | None = None
    manifest: dict = {}
