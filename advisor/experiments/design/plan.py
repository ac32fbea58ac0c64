"""The experiment's plan: which knob, which value, which workload, which block order, which
readouts. Everything is validated here, before anything starts; --dry-run prints this."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from advisor.experiments.design.capacity import CapacityPlan
from advisor.experiments.design.deployment import Deployment
from advisor.workload.plan import PlannedRequest, plan
from advisor.workload.spec import Workload

# Probe signals named by diagnosis checks (and --readout), as readouts of the one vocabulary
# (advisor/readout_vocabulary.py) that the knob catalog uses too. The secondary readouts are the
# knob's own catalog list (setup.design).
SIGNAL_READOUT = {
    "ttft_p95": ("ttft", "p95"), "ttft_p50": ("ttft", "p50"), "ttft_p99": ("ttft", "p99"),
    "tpot_p95": ("tpot", "p95"), "tpot_p50": ("tpot", "p50"), "itl_p95": ("itl", "p95"),
    "e2e_p99": ("e2e", "p99"), "e2e_p95": ("e2e", "p95"), "e2e_p50": ("e2e", "p50"),
    "generation_tokens_per_s": ("output_tokens", "per_s"), "request_rate": ("throughput", "per_s"),
    "error_rate": ("errors", "ratio"), "admission_rejections_per_s": ("errors", "ratio"),
    "urgent_ttft_p50": ("urgent_ttft", "p50"), "urgent_ttft_p95": ("urgent_ttft", "p95"),
    "urgent_e2e_p95": ("urgent_e2e", "p95"),
}


@dataclass
class Guardrails:
    max_duration_s: float = 1800.0
    max_requests: int = 5000
    max_error_rate: float = 0.2
    health_every_s: float = 2.0


@dataclass(frozen=True)
class Stopping:
    """When the runner looks at the primary and at which nominal level.

    sequential: looks after every pair of blocks from `first_look` to the maximum, each at its
    boundary level `levels[k - first_look]`; fixed: one look at the maximum at `alpha`."""

    sequential: bool = False
    boundary: str = "wang-tsiatis"
    alpha: float = 0.05
    first_look: int = 2
    levels: tuple[float, ...] = ()

    def level_at(self, k: int, max_blocks: int) -> float | None:
        """The nominal level of the look after k blocks per arm; None where there is no look."""
        if not self.sequential:
            return self.alpha if k == max_blocks else None
        if k < self.first_look or k > max_blocks:
            return None
        return self.levels[k - self.first_look]

    def describe(self, max_blocks: int) -> str:
        if not self.sequential or self.first_look >= max_blocks:
            return f"fixed horizon: one look after {max_blocks} blocks per arm at {self.alpha:.0%}"
        name = {"obrien-fleming": "O'Brien-Fleming", "wang-tsiatis": "Wang-Tsiatis, delta 0.25",
                "pocock": "Pocock"}.get(self.boundary, self.boundary)
        return (f"sequential ({name}, overall {self.alpha:.0%}): a look after each pair of blocks from "
                f"{self.first_look} to {max_blocks} per arm, nominal levels {_pct(self.levels[0])} .. "
                f"{_pct(self.levels[-1])}; stops at the first decisive look")


def _pct(a: float) -> str:
    return f"{100 * a:.2g}%"


@dataclass
class Design:
    id: str
    deployment: Deployment
    mechanism: str
    value: object
    baseline_args: list[str]
    candidate_args: list[str]
    candidate_env: dict[str, str]
    workload: Workload
    requests: list[PlannedRequest]
    blocks_per_arm: int
    order: list[tuple[str, int]]
    warmup_requests: int
    primary: tuple[str, str]
    secondary: list[tuple[str, str]]
    guardrails: Guardrails = field(default_factory=Guardrails)
    numerics: bool = False
    fails_means: str = ""
    watch: tuple[str, ...] = ()  # the knob's server signals to watch (catalog `watch`), read per block
    direction: str | None = None   # what the check prescribed (None: a given value or the knob's default)
    seed_pinned: bool = False      # the workload's seed was given (file or caller), not drawn fresh
    stopping: Stopping = field(default_factory=Stopping)  # default: fixed horizon, one look at the maximum
    plan: list[str] = field(default_factory=list)  # how the blocks were sized (planning.Plan.describe)
    aa: bool = False  # a deliberate A/A run: both arms run the baseline's configuration
    models: dict = field(default_factory=dict)  # a model-file swap: arm -> ModelLayers (model_swap.py)
    replicas: dict = field(default_factory=dict)  # the replicas knob: arm -> engine replicas (same argv)
    # The baseline arm with parallel local arms: "auto" (a fresh replica when the process found
    # serving has traffic of its own), "fresh", or "found" (that process, its traffic reported).
    baseline: str = "auto"
    # A capacity experiment (--readout capacity): both arms searched for their capacity at the SLO,
    # in trials of `requests` at changing rates, instead of blocks.
    capacity: CapacityPlan | None = None

    def describe(self) -> list[str]:
        w = self.workload
        a = w.arrival
        shape = f"closed loop, concurrency {a.concurrency}" if a.kind == "concurrency" else f"{a.kind} {a.rate:g} req/s"
        order = " ".join(f"{'A' if arm == 'baseline' else 'B'}{b + 1}" for arm, b in self.order)
        return [
            f"experiment {self.id} on {self.deployment.name} ({self.deployment.engine}, {self.deployment.launcher} launcher"
            + (f", {self.deployment.local.arms} arms" if self.deployment.local else "") + ")",
            ("A/A: both arms run the baseline's configuration, to measure the target's noise" if self.aa else
             f"mechanism {self.mechanism} -> {self.value!r}"
             + (f" (direction {self.direction}, from the baseline's current value)" if self.direction else ""))
            + f"; primary readout {self.primary[0]} {self.primary[1]}",
            "secondary readouts (behind a decisive primary, Holm among them): " + (", ".join(f"{m} {st}" for m, st in self.secondary) or "none"),
            *(f"{arm} model: {m.line()}" for arm, m in self.models.items()),
            *([f"replicas: baseline {self.replicas['baseline']}, candidate {self.replicas['candidate']} (the same "
               "argv on each; the advisor's client sends each request to the replica with the fewest in flight)"]
              if self.replicas else []),
            self.baseline_line(),
            f"baseline argv: {' '.join(self.baseline_args) or '(none)'}",
            f"candidate argv: {' '.join(self.candidate_args) or '(none)'}"
            + (f"  env {self.candidate_env}" if self.candidate_env else ""),
            f"workload {w.name} ({w.source}): {len(self.requests)} requests per "
            + (f"trial, {'poisson' if a.kind == 'concurrency' else a.kind} arrivals at the search's rates"
               if self.capacity else f"block, {shape}") + f", seed {w.seed}"
            + (" (pinned by the workload)" if self.seed_pinned else " (fresh for this experiment)"),
            *(self.capacity.describe() if self.capacity else [
                f"blocks: {order} (at most {self.blocks_per_arm} per arm), warmup {self.warmup_requests} requests "
                "after every (re)start of an arm",
                f"stopping: {self.stopping.describe(self.blocks_per_arm)}",
                *self.plan]),
            f"guardrails: at most {self.guardrails.max_duration_s:.0f}s and {self.guardrails.max_requests} requests; "
            + ("each arm's search within half of them (a partial answer past it, with its interval so far); abort "
               "when the candidate is unhealthy (a failed request counts as outside every SLO instead)" if self.capacity else
               f"abort above {self.guardrails.max_error_rate:.0%} errors or when the candidate is unhealthy"),
        ]


    def baseline_line(self) -> str:
        """Which process serves the baseline arm, and the rule that picks it at the start (the plan
        touches nothing, so the outside-traffic check it depends on runs when the experiment starts)."""
        local = self.deployment.local
        if self.deployment.kubernetes is not None:
            k = self.deployment.kubernetes
            return (f"baseline arm: a fresh workload cloned from {k.workload} (namespace {k.namespace}), created "
                    "with the candidate; the target is only read and serves its users untouched")
        if local is None:
            return "baseline arm: the endpoint given as the deployment's baseline, as found"
        found = f"the engine serving port {local.port}"
        if local.arms == "sequential":
            return (f"baseline arm: {found} (sequential arms: the candidate takes the port between blocks; outside "
                    "traffic on it is listened for before the first block and counted per block)")
        if local.baseline_port is not None:
            return f"baseline arm: a fresh replica on port {local.baseline_port} (local.baseline_port), started like the candidate"
        if self.baseline == "fresh":
            return "baseline arm: a fresh replica on a free port, started like the candidate (--baseline fresh)"
        if self.baseline == "found":
            return f"baseline arm: {found}, as found, its outside traffic counted and reported per block (--baseline found)"
        return (f"baseline arm: {found}, unless it carries outside traffic when the experiment starts (listened for "
                "3 s): then a fresh replica started like the candidate where the host has room, or a refusal with "
                "the choices where it has none (--baseline auto)")


def block_order(blocks_per_arm: int) -> list[tuple[str, int]]:
    """A B B A A B ...: balanced against drift, and half the switches of A B A B (each switch is an
    engine restart with sequential arms)."""
    order, arms = [], ("baseline", "candidate")
    for b in range(blocks_per_arm):
        pair = arms if b % 2 == 0 else arms[::-1]
        order += [(arm, b) for arm in pair]
    return order


_LAST_ID: list[datetime] = []


def new_id() -> str:
    """exp-YYYYmmdd-HHMMSS (UTC); never the same twice in one process (a second design within the
    same second takes the next second), so that each experiment's fresh seed differs."""
    now = datetime.now(timezone.utc).replace(microsecond=0)
    if _LAST_ID and now <= _LAST_ID[0]:
        now = _LAST_ID[0] + timedelta(seconds=1)
    _LAST_ID[:] = [now]
    return now.strftime("exp-%Y%m%d-%H%M%S")


def fresh_seed(experiment_id: str) -> int:
    """The workload seed of an experiment that does not pin one: derived from its id, so that each
    experiment draws prompts no engine has seen (a warm prefix cache would favour the arm that has)."""
    return zlib.crc32(f"seed:{experiment_id}".encode()) & 0x7FFFFFFF


def with_seed(workload: Workload, seed: int, pinned: bool) -> Workload:
    """The workload with `seed`, unless the workload pins its own (a seed written in its file) and
    the caller did not pin one."""
    if not pinned and "seed" in workload.model_fields_set:
        return workload
    return workload.model_copy(update={"seed": seed})


def default_workload(mechanism: str, requests: int, concurrency: int, seed: int) -> Workload:
    """A workload that exercises the mechanism when none is given: shared prefixes for prefix
    caching, a deep queue for batch limits, a plain mix otherwise."""
    spec: dict = {"name": f"default-{mechanism}", "source": "advisor default for the mechanism", "seed": seed,
                  "requests": requests, "arrival": {"kind": "concurrency", "concurrency": concurrency},
                  "buckets": [{"prompt_tokens": [300, 500], "output_tokens": [24, 32]}]}
    if mechanism == "prefix_caching":
        spec["buckets"] = [{"prompt_tokens": [700, 800], "output_tokens": 16}]
        spec["prefix"] = {"groups": 2, "tokens": 600, "share": 0.9}
    elif mechanism == "max_num_seqs":
        # Decode-bound requests queue for batch slots; prefill-bound ones would only queue inside
        # the engine instead, whatever the slot count.
        spec["buckets"] = [{"prompt_tokens": [50, 100], "output_tokens": [128, 192]}]
    elif mechanism == "scheduling_policy":
        # Two classes in one queue: a few interactive requests (priority 0, short answers) among
        # batch ones (priority 1, long answers) that hold the slots; only a priority scheduler lets
        # the interactive ones overtake.
        spec["buckets"] = [
            {"name": "interactive", "prompt_tokens": [50, 100], "output_tokens": [8, 16], "weight": 1, "priority": 0},
            {"name": "batch", "prompt_tokens": [50, 100], "output_tokens": [96, 128], "weight": 3, "priority": 1}]
    elif mechanism in ("max_num_batched_tokens", "chunked_prefill", "replicas", "data_parallel"):
        spec["buckets"] = [{"prompt_tokens": [500, 700], "output_tokens": 32}]
    return Workload.model_validate(spec)


def requests_for(workload: Workload) -> list[PlannedRequest]:
    return plan(workload)
