"""What an experiment reports: its Judgement (the verdict on its primary readout with the interval,
every other readout's, the looks, the quality guard's and the memory's say, the cost), the blocks
it ran, what the arms were, and the manifest.

The schema only: the Judgement is decided in advisor/experiments/judgement/judge.py, and nothing here
imports numpy, so that the store and the reports read a result without loading the statistics.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, PrivateAttr, model_serializer, model_validator

from advisor.capacity.result import CapacityResult
from advisor.cost import ExperimentCost
from advisor.models.four_layers import ModelLayers
from advisor.verdict import ExperimentKey, Verdict

Statistic = Literal["p50", "p95", "p99", "mean", "per_s", "ratio"]


class MetricResult(BaseModel):
    """One metric's comparison: the ratio candidate/baseline of a statistic, its CI and verdict."""

    metric: str
    statistic: Statistic
    lower_is_better: bool
    baseline_value: float | None = Field(description="the statistic over the baseline's pooled samples")
    candidate_value: float | None = Field(description="the statistic over the candidate's pooled samples")
    ratio: float | None = Field(description="estimate of candidate/baseline (exp of the HL shift for p50)")
    ci: tuple[float, float] | None = Field(description="CI of the ratio at `level`")
    level: float = Field(description="confidence level of `ci` (Holm-adjusted for secondaries)")
    p_value: float | None = Field(description="two-sided p of 'ratio = 1'")
    adjusted_p: float | None = Field(description="Holm-adjusted p (= p_value for a primary)")
    verdict: Verdict
    method: str
    n_blocks: tuple[int, int] = Field(description="(baseline, candidate)")
    n_samples: tuple[int, int] = Field(description="(baseline, candidate)")
    margin: float
    reason: str

    # The stats.Estimate it was judged from, for an interval at another level (a Holm rank): the
    # data stay out of the serialised model, so a result read back from the store has none. Not
    # typed by name: the schema does not import the statistics (numpy) it is read without.
    _estimate: Any = PrivateAttr(default=None)


class Look(BaseModel):
    """One interim (or the final) look of an experiment at its primary readout."""

    blocks: int = Field(description="blocks per arm at this look (pairs of blocks run so far)")
    alpha: float = Field(description="nominal two-sided level of this look's interval, from the boundary")
    verdict: Verdict
    ratio: float | None
    ci: tuple[float, float] | None
    requests: int | None = Field(default=None, description="requests sent to both arms so far")
    reason: str | None = Field(default=None, description="why this look has no ratio or no verdict yet")


class ServerReadout(BaseModel):
    """What the arm's own engine said about one block (its /metrics, scraped before, during and
    after it): the catalog's signals, and the requests it counted against those the advisor sent."""

    signals: dict[str, float | None] = Field(default={}, description="signal name -> value over the block "
                                             "(None: the engine does not export it, or it counted nothing)")
    window_s: float | None = None
    requests_counted: int | None = Field(default=None, description="requests the engine finished in the window")
    outside_requests: int | None = Field(default=None, description="requests it finished beyond those the "
                                         "advisor sent: outside traffic on this arm during the block")
    note: str | None = Field(default=None, description="why there are no readouts, or a caveat")


class ServerRow(BaseModel):
    """One server signal per arm: the median of its blocks' values."""

    signal: str
    baseline: float | None
    candidate: float | None
    watched: bool = Field(description="the knob's catalog names it as a signal to watch")


class BlockRecord(BaseModel):
    arm: str
    block: int
    requests: int
    ok: int
    errors: int
    ttft_p50: float | None
    tpot_p50: float | None
    e2e_p95: float | None
    generator_valid: bool = Field(description="the load generator held its plan: only valid blocks are judged")
    why_invalid: str | None = None
    run_id: int | None = None
    restart_s: float | None = Field(default=None, description="seconds the arm took to (re)start before this "
                                    "block; None when it was already serving")
    warmup_requests: int = Field(default=0, description="unmeasured requests sent before this block, after a (re)start")
    server: ServerReadout | None = Field(default=None, description="the arm's engine's own readouts for this block")
    resident_bytes: int | None = Field(default=None, description="the arm's engine processes' resident memory "
                                       "(RSS, summed over its process tree) right after this block's load")
    weights_resident_bytes: int | None = Field(default=None, description="the part of it that maps the arm's "
                                               "model file (an engine that mmaps its weights)")
    gpu_bytes: int | None = Field(default=None, description="GPU memory its processes hold (NVML)")
    host_cpu_busy: float | None = Field(default=None, description="share of this host's CPU time busy while the "
                                        "block ran (all cores)")
    generator_cpu: float | None = Field(default=None, description="the load generator's own CPU while the block "
                                        "ran, as a share of one core")
    generator_waited: float | None = Field(default=None, description="share of the block's time the load "
                                           "generator was ready to run but waited for a CPU (run-queue delay)")


QualityVerdict = Literal["within margin", "past margin", "unclear"]


class QualityGuard(BaseModel):
    """The candidate's greedy outputs against the baseline's, on the shipped prompt set, in one run
    (advisor/experiments/judgement/quality.py)."""

    prompts: int
    exact_match: float = Field(description="share of prompts whose greedy outputs are identical")
    token_agreement: float = Field(description="share of the baseline's tokens that the candidate reproduced "
                                   "before its first divergence")
    note: str
    logprob_diff: float | None = Field(default=None, description="mean over prompts of the per-token difference "
                                       "candidate - baseline in log-likelihood of the baseline's own tokens (nats)")
    logprob_ci: tuple[float, float] | None = Field(default=None, description="95% interval of logprob_diff")
    margin: float | None = Field(default=None, description="the drop in nats per token past which quality regressed")
    verdict: QualityVerdict | None = Field(default=None, description="the interval against -margin")
    positions: int | None = Field(default=None, description="token positions compared")


class MemoryReadout(BaseModel):
    """Each arm's memory, the median over its valid blocks: the whole process tree's (RSS); where the
    engine maps its model file (llama.cpp), the weights' share of it; and its GPU memory (NVML)."""

    baseline_bytes: int | None
    candidate_bytes: int | None
    baseline_weights_bytes: int | None = None
    candidate_weights_bytes: int | None = None
    baseline_gpu_bytes: int | None = None
    candidate_gpu_bytes: int | None = None

    @staticmethod
    def _ratio(b: int | None, c: int | None) -> float | None:
        return c / b if b and c is not None else None

    @property
    def ratio(self) -> float | None:
        return self._ratio(self.baseline_bytes, self.candidate_bytes)

    @property
    def weights_ratio(self) -> float | None:
        return self._ratio(self.baseline_weights_bytes, self.candidate_weights_bytes)

    @property
    def gpu_ratio(self) -> float | None:
        return self._ratio(self.baseline_gpu_bytes, self.candidate_gpu_bytes)


class ReadoutNoise(BaseModel):
    """One readout's noise as an A/A run measured it (advisor/experiments/design/calibration.py)."""

    metric: str
    statistic: str
    block_sd: float = Field(description="log-SD of the block statistic between blocks of one arm")
    sampling_sd: float = Field(description="its within-block sampling part (bootstrap), at requests_per_block")
    drift_sd: float = Field(description="what sampling does not explain: sqrt(max(0, block^2 - sampling^2))")
    blocks: int


class BucketResult(BaseModel):
    """One workload bucket's readouts, each judged on that bucket's requests of every valid block:
    prefill (TTFT) and decode (TPOT) told apart per prompt x output length. Exploratory: at the
    experiment's level, without a correction for the number of buckets."""

    bucket: str
    requests: tuple[int, int] = Field(description="(baseline, candidate) requests of this bucket judged")
    metrics: list[MetricResult] = []


class Overrule(BaseModel):
    """A verdict the speed readouts reached, changed by what they do not measure."""

    by: Literal["quality"]
    was: Verdict = Field(description="the verdict of the speed readouts alone")
    verdict: Verdict = Field(description="the verdict it gave instead (the same where it only gave the reason)")
    reason: str


class Judgement(BaseModel):
    """What an experiment's blocks say, decided once (advisor/experiments/judgement/judge.py) and stored
    with its result: every view shows it, none recomputes it."""

    verdict: Verdict
    primary_metric: str
    ratio: float | None = Field(default=None, description="the primary's candidate/baseline estimate")
    ci: tuple[float, float] | None = Field(default=None, description="the primary's CI at the last look's level")
    reason: str | None = Field(default=None, description="why this verdict: the primary's reason, or why it "
                               "could not be judged (aborted, too many invalid blocks), or the overrule's")
    metrics: list[MetricResult] = Field(default=[], description="the primary first, then the secondaries "
                                        "behind it (Holm among them)")
    looks: list[Look] = Field(default=[], description="the looks taken at the primary, in order")
    stop_reason: str | None = Field(default=None, description="why the experiment stopped when it did")
    quality: QualityGuard | None = None
    overrule: Overrule | None = Field(default=None, description="what changed the speed readouts' verdict")
    memory: MemoryReadout | None = Field(default=None, description="each arm's resident memory")
    explanation: str | None = Field(default=None, description="the map's reading of a failure, from the readouts "
                                    "(e.g. dequantization ate the gain: memory fell, TPOT did not)")
    buckets: list[BucketResult] = Field(default=[], description="per workload bucket, when it has more than one")
    cost: ExperimentCost | None = Field(default=None, description="both arms' cost per output token and the "
                                        "candidate's ratio, from the throughput readouts judged here")
    cost_note: str | None = Field(default=None, description="why no cost is shown")

    @property
    def level(self) -> float | None:
        """The confidence level of `ci`: the primary's, at the last look."""
        return self.metrics[0].level if self.metrics else None


_JUDGED = frozenset(Judgement.model_fields)


class ExperimentResult(BaseModel):
    """One experiment as it ran and as it was judged. Serialised flat, as earlier advisors wrote it:
    the Judgement's fields stand beside the run's (verdict, ratio, ci, metrics, looks, cost, ...),
    which is what `advisor experiment --output json` prints and the store keeps."""

    id: ExperimentKey
    deployment: str
    mechanism: str
    value: str
    status: str = Field(description="finished | aborted")
    judgement: Judgement
    blocks: list[BlockRecord] = []
    aborted: str | None = None
    baseline_restored: bool | None = None
    restore_note: str | None = None
    fails_means: str | None = None
    server: list[ServerRow] = Field(default=[], description="server readouts per arm (median over its blocks)")
    arms: dict[str, dict] = Field(default={}, description="what each arm's engine said it is (/version, "
                                  "/v1/models, its config info metrics), read at its first block")
    server_notes: list[str] = Field(default=[], description="outside traffic, unreadable /metrics, and what "
                                    "the watched signals say about a failure")
    calibration: list[ReadoutNoise] | None = Field(default=None, description="A/A runs: the noise measured "
                                                   "per readout, stored for later plans")
    models: dict[str, ModelLayers] = Field(default={}, description="a model-file swap: each arm's model in the "
                                            "map's four layers")
    kubernetes: dict = Field(default={}, description="a Kubernetes experiment: the cluster's version, the target, "
                             "and per arm its workload, pods, nodes, GPU models, image digests and argv")
    capacity: dict[str, CapacityResult] = Field(default={}, description="a capacity experiment: each arm's "
                                                 "search, its answer and trials (the attainment curve)")
    manifest: dict = {}

    # The valid blocks' request records, for what is computed after the run (an A/A calibration).
    _by_block: dict = PrivateAttr(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _judgement_of_flat(cls, data: Any) -> Any:
        # A stored document (or a caller) gives the Judgement's fields flat; with a `judgement`
        # given as well, the flat copies are what serialising it wrote beside it, and are dropped.
        if not isinstance(data, dict):
            return data
        rest = {k: v for k, v in data.items() if k not in _JUDGED}
        if "judgement" not in rest:
            rest["judgement"] = {k: v for k, v in data.items() if k in _JUDGED}
        return rest

    @model_serializer(mode="wrap")
    def _flat(self, handler) -> dict[str, Any]:
        data = handler(self)
        data.update(data.pop("judgement", None) or {})
        return data

    # The Judgement's fields, read off the result as JSON readers know them.
    @property
    def verdict(self) -> Verdict:
        return self.judgement.verdict

    @property
    def primary_metric(self) -> str:
        return self.judgement.primary_metric

    @property
    def ratio(self) -> float | None:
        return self.judgement.ratio

    @property
    def ci(self) -> tuple[float, float] | None:
        return self.judgement.ci

    @property
    def reason(self) -> str | None:
        return self.judgement.reason

    @property
    def metrics(self) -> list[MetricResult]:
        return self.judgement.metrics

    @property
    def looks(self) -> list[Look]:
        return self.judgement.looks

    @property
    def stop_reason(self) -> str | None:
        return self.judgement.stop_reason
