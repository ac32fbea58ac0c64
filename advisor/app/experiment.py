"""One experiment, as every front door runs it: the request's inputs checked and loaded, the design,
its plan, and the run that ends in a stored result.

`advisor experiment`, the dashboard's "prove this check" (in a worker process: advisor/app/jobs.py)
and its preview build an `ExperimentRequest`; none of them repeats what is done here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from advisor.ranges import BLOCKS_MAX, WARMUP_MAX
from advisor.cost import price_for
from advisor.experiments.arms.kube import KubeLauncher
from advisor.experiments.arms.kube_clone import manifests_yaml
from advisor.experiments.design import planning
from advisor.experiments.run import session
from advisor.knobs import DIRECTIONS
from advisor.knobs.argv import flag_changes
from advisor.units import MAX_EXPERIMENT_S, check_ceiling, parse_duration
from advisor.workload.spec import load_workload
from advisor.experiments.design.deployment import load_deployment
from advisor.experiments.design.capacity import CAPACITY_SIGNAL, CapacityPlanError, capacity_plan
from advisor.experiments.run.setup import DesignError, effective_guardrails
from advisor.experiments.run.setup import design as make_design


if TYPE_CHECKING:
    from advisor.cost import Price
    from advisor.experiments.design.deployment import Deployment
    from advisor.experiments.design.plan import Design
    from advisor.experiments.design.planning import PlanRow
    from advisor.experiments.result import ExperimentResult


class ExperimentRequest(BaseModel):
    """What `advisor experiment` takes, typed: the worker process reads it as JSON."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    deployment: Path
    mechanism: str | None = None
    value: str | None = None
    workload: Path | None = None
    from_prom: str | None = None
    blocks: int | None = Field(default=None, ge=2, le=BLOCKS_MAX)
    block_requests: int | None = Field(default=None, ge=1)
    effect: float = Field(default=0.3, ge=0.01, le=5.0)
    fixed: bool = False
    aa: bool = False
    concurrency: int | None = Field(default=None, ge=1)
    warmup: int = Field(default=16, ge=0, le=WARMUP_MAX)
    direction: str | None = None
    diagnosis_id: int | None = Field(default=None, ge=1)
    readout: str | None = None
    slo: Path | None = None  # the capacity readout's SLOs
    width: float = Field(default=0.10, gt=0, lt=0.5)  # the capacity readout's search width, each arm
    start_rate: float | None = Field(default=None, gt=0)  # the capacity readout's first rate, both arms
    save: bool = True
    max_duration: str | None = None
    max_requests: int | None = Field(default=None, ge=1)
    max_error_rate: float | None = Field(default=None, ge=0.0, le=1.0)
    price_per_hour: str | None = None
    baseline: Literal["auto", "fresh", "found"] = "auto"


class PlanSummary(BaseModel):
    """A dry run: what the experiment would run, touching nothing."""

    dry_run: bool = True
    plan: list[str]
    baseline_argv: list[str]
    candidate_argv: list[str]
    changes: list[str] = Field(description="what the candidate's command line changes, one line per flag")
    guardrails: list[str]
    max_blocks_per_arm: int
    requests_per_block: int
    first_look: int
    sequential: bool
    manifests: str | None = Field(default=None, description="launcher kubernetes: the two arms' manifests as "
                                  "`kubectl apply -f` takes them, the knob's line marked")


@dataclass(frozen=True)
class Prepared:
    """The request's files and settings, loaded and checked."""

    deployment: Deployment
    price: Price | None
    workload: object | None
    guardrails: object
    calibration: object | None


def _quiet(_: str) -> None:
    return None


def prepare(req: ExperimentRequest) -> Prepared:
    """Every input loaded and checked before anything is started; each error one line."""

    dep = load_deployment(req.deployment)
    price = price_for(req.price_per_hour, (dep.cost, f"deployment spec {req.deployment}"))
    if req.workload and req.from_prom:
        raise DesignError("give at most one of --workload and --from-prom")
    try:
        duration_s = parse_duration(req.max_duration) if req.max_duration is not None else None
        if duration_s is not None:
            check_ceiling(duration_s, MAX_EXPERIMENT_S, "the guardrail", "the longest experiment")
    except ValueError as e:
        raise DesignError(f"--max-duration: {e}") from None
    workload = load_workload(req.workload) if req.workload else None
    if req.from_prom:
        from advisor import net
        from advisor.workload.telemetry import workload_from_prometheus

        prom, http = net.target(req.from_prom, "prom", "--from-prom")  # credentials split off here
        if http.auth is None:  # advisor.yaml's, split off its prom_url in this process
            http = net.config("prom", url=prom)
        workload = workload_from_prometheus(prom, http=http)
    guardrails = effective_guardrails(dep, max_duration_s=duration_s, max_requests=req.max_requests,
                                      max_error_rate=req.max_error_rate)
    return Prepared(dep, price, workload, guardrails, session.stored_calibration(dep))


def plans(req: ExperimentRequest, prepared: Prepared | None = None) -> list[PlanRow]:
    """`--plan` without a mechanism: the blocks and requests each primary readout needs."""

    p = prepared or prepare(req)
    return planning.table(p.calibration, req.effect, req.block_requests)


def design(req: ExperimentRequest, prepared: Prepared | None = None) -> Design:
    """The experiment's design: both arms, the workload, the blocks and looks, the guardrails."""

    p = prepared or prepare(req)
    if not req.mechanism and not req.aa:
        raise DesignError("give --mechanism (the knob to change), or --aa for an A/A run, or --plan")
    if req.direction is not None and req.direction not in DIRECTIONS:
        raise DesignError(f"--direction {req.direction!r}: use one of {', '.join(DIRECTIONS)}")
    if req.aa and (req.mechanism or req.value):
        raise DesignError("--aa runs the baseline's own configuration on both arms: give no --mechanism or --value")
    capacity = None
    if req.readout == CAPACITY_SIGNAL:
        if req.blocks is not None or req.fixed:
            raise DesignError("--blocks and --fixed plan blocks; --readout capacity runs a rate search on each arm "
                              "instead (--block-requests sets its trials' size, --width its interval)")
        try:
            capacity = capacity_plan(req.slo, width=req.width, trial_requests=req.block_requests,
                                     start_rate=req.start_rate)
        except CapacityPlanError as e:
            raise DesignError(str(e)) from None
    elif req.slo is not None:
        raise DesignError("--slo is the SLO file of --readout capacity (other readouts are judged as ratios, not "
                          "against an SLO)")
    elif req.start_rate is not None:
        raise DesignError("--start-rate is the first rate of --readout capacity's searches (other readouts replay "
                          "the workload's own arrivals)")
    return make_design(p.deployment, req.mechanism, req.value, p.workload, blocks=req.blocks,
                       block_requests=None if capacity else req.block_requests, capacity=capacity,
                       concurrency=req.concurrency, readout_signal=req.readout,
                       warmup=req.warmup, guardrails=p.guardrails, sequential=not req.fixed, effect=req.effect,
                       aa=req.aa, calibration=p.calibration, direction=req.direction, baseline=req.baseline)


def summary(d: Design) -> PlanSummary:
    lines = d.describe()
    return PlanSummary(plan=lines, baseline_argv=d.baseline_args, candidate_argv=d.candidate_args,
                       changes=flag_changes(d.baseline_args, d.candidate_args),
                       guardrails=[line for line in lines if "guardrail" in line.lower()],
                       max_blocks_per_arm=d.blocks_per_arm, requests_per_block=len(d.requests),
                       first_look=d.stopping.first_look, sequential=d.stopping.sequential,
                       manifests=arm_manifests(d))


def arm_manifests(d: Design) -> str | None:
    """The arms a Kubernetes experiment would create, read from the cluster and created nowhere."""
    if d.deployment.kubernetes is None:
        return None
    launcher = KubeLauncher(d.deployment, d.baseline_args, d.candidate_args, None, d.id,
                            replicas=d.replicas or None)
    try:
        return manifests_yaml(launcher.plan())
    finally:
        launcher.close()


def preview(req: ExperimentRequest) -> PlanSummary:
    return summary(design(req))


def run(req: ExperimentRequest, *, say: Callable[[str], None] = _quiet,
        note: Callable[[str], None] | None = None) -> ExperimentResult:
    """The experiment, run to its stored result: any verdict, or status "aborted" after a guardrail
    or an interrupt (the baseline restored first; the interrupt is not raised again). Raises
    AdvisorError (one line) when it cannot start, the target left as found."""

    p = prepare(req)
    d = design(req, p)
    try:
        return session.run(d, save=req.save, say=say, note=note, diagnosis_id=req.diagnosis_id, price=p.price)
    except session.KeyboardInterruptWithResult as e:
        return e.result


__all__ = ["ExperimentRequest", "PlanSummary", "Prepared", "arm_manifests", "design", "plans", "prepare", "preview",
           "run", "summary"]
