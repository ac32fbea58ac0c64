"""The diagnosis, as every front door runs it: inputs checked, a snapshot, the rules against the
SLOs, cost, the top checks' experiments, and the result saved.

`advisor diagnose`, the dashboard's "diagnose now", the schedule and the local demo each build a
`DiagnoseRequest` and call `diagnose`; none of them repeats the sequence.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from advisor.app.snapshot import Source, take
from advisor.errors import AdvisorError
from advisor.ranges import BLOCKS_MAX

if TYPE_CHECKING:
    from advisor.app.alerts_out import AlertsOut
    from advisor.diagnosis.model import Diagnosis, Trigger
    from advisor.experiments.design.deployment import Deployment
    from advisor.experiments.result import ExperimentResult
    from advisor.fleet.config import WatchedDeployment
    from advisor.store import Store
    from probes import Snapshot

BaselineChoice = Literal["auto", "fresh", "found"]


class UsageProblem(AdvisorError):
    """Options that do not go together, or a target with nothing to diagnose."""


def _quiet(_: str) -> None:
    return None


@dataclass(frozen=True)
class DiagnoseRequest:
    """What to diagnose and how. Paths are read by the service, each error one line naming it.

    deployment_optional: a spec that does not load costs the diagnosis the model's facts only (a
    watched deployment diagnosed on schedule), instead of ending it. stored_as: the name the
    diagnosis is saved under (advisor.yaml's deployment name); default, the spec's name.
    prices: further (price, where it was said) sources after --price-per-hour and the spec's cost."""

    source: Source
    slo: Path | None = None
    rules_config: Path | None = None
    deployment: Path | None = None
    deployment_optional: bool = False
    experiments: int = 0
    blocks: int | None = None  # the most blocks per arm of each experiment; None: planned per check
    workload: Path | None = None
    price_per_hour: str | None = None
    prices: tuple[tuple[object, str], ...] = ()
    baseline: BaselineChoice = "auto"
    save: bool = False
    stored_as: str | None = None
    trigger: Trigger | None = None  # the alert that asked for it: kept with the diagnosis, shown on its page


@dataclass(frozen=True)
class DiagnoseOutcome:
    diagnosis: Diagnosis
    snapshot: Snapshot
    deployment: Deployment | None
    saved_id: int | None = None
    stored_as: str | None = None
    experiments: tuple[ExperimentResult, ...] = ()  # what its checks' experiments found, in the order run


@dataclass(frozen=True)
class _Inputs:
    slo: object
    rules: list
    deployment: Deployment | None
    workload: object | None
    price: object | None


def _inputs(req: DiagnoseRequest) -> _Inputs:
    """Every input checked before the target is read."""
    from advisor.cost import price_for
    from advisor.diagnosis import load_overrides, load_rules, load_slo
    from advisor.settings import get_settings

    settings = get_settings()
    slo = load_slo(req.slo or settings.slo_file)
    overrides_file = req.rules_config or settings.rules_config
    rules = load_rules(overrides=load_overrides(overrides_file) if overrides_file else {})
    if req.experiments and not req.deployment:
        raise UsageProblem("--experiment needs --deployment (how to launch the candidate)")
    if req.blocks is not None and not req.experiments:
        raise UsageProblem("--blocks limits the experiments' blocks: it needs --experiment N")
    if req.blocks is not None and not 2 <= req.blocks <= BLOCKS_MAX:
        raise UsageProblem(f"--blocks must be between 2 and {BLOCKS_MAX}, not {req.blocks}")
    if req.workload and not req.experiments:
        raise UsageProblem("--workload is what the experiments replay: it needs --experiment N")
    dep = None
    if req.deployment:
        from advisor.experiments.design.deployment import load_deployment

        try:
            dep = load_deployment(req.deployment)
        except AdvisorError:
            if not req.deployment_optional:
                raise
    workload = None
    if req.workload:
        from advisor.workload.spec import load_workload

        workload = load_workload(req.workload)
    price = price_for(req.price_per_hour, (dep.cost if dep else None, f"deployment spec {req.deployment}"),
                      *req.prices)
    return _Inputs(slo, rules, dep, workload, price)


def _check_store() -> None:
    """The store opened (created, migrated) before anything runs: an unwritable data dir or a bad
    ADVISOR_DB_URL is one line now, not a lost result later."""
    from advisor.settings import get_settings
    from advisor.store import open_store

    open_store(get_settings().database_url).close()


def diagnose(req: DiagnoseRequest, *, say: Callable[[str], None] = _quiet,
             progress: Callable[[str, float, float], None] | None = None, store: Store | None = None) -> DiagnoseOutcome:
    """The diagnosis of `req.source`; with req.save (or a `store` given), saved. Raises AdvisorError
    (one line) when it cannot be made; an interrupt during an experiment ends after its restore."""
    from advisor.diagnosis import diagnose as run_rules
    from advisor.diagnosis import per_replica_signals
    from advisor.models import served_structure
    from advisor.settings import get_settings
    from advisor.workload.tokenize_cost import for_snapshot

    settings = get_settings()
    inputs = _inputs(req)
    if req.save and store is None:
        _check_store()
    # Only what the rules read replica by replica is broken down: at 64 replicas the full breakdown
    # is most of the query time (benchmarks/README.md).
    snap = take(req.source, per_replica=per_replica_signals(inputs.rules), progress=progress)
    if not any(s.present for s in snap.signals.values()):
        raise UsageProblem(f"{snap.target} returned no data for any signal in the window: nothing to diagnose")
    dep = inputs.deployment
    structure, why_not = served_structure(snap, dep)
    engine_url = req.source.url or (dep.baseline_url if dep else None)
    if req.source.at:  # the tokenizer as it is now says nothing about a past window's TTFT
        tokenization, tok_note = None, "a diagnosis of a past window (--at) does not time the live target"
    else:
        if engine_url:
            say("timing the target's /tokenize at the deployment's prompt lengths")
        tokenization, tok_note = for_snapshot(snap, engine_url, timeout=settings.timeout)
    result = run_rules(snap, inputs.rules, inputs.slo, model=structure, model_note=why_not,
                       tokenization=tokenization, tokenization_note=tok_note)
    from advisor.cost import diagnosis_cost

    result.cost, result.cost_note = diagnosis_cost(snap, inputs.slo, inputs.price)
    ran: list[ExperimentResult] = []
    if req.experiments:
        from advisor.experiments.run.checks import verify_top_checks

        ran = verify_top_checks(result, dep, req.experiments, price=inputs.price, workload=inputs.workload,
                                baseline=req.baseline, blocks=req.blocks, say=say)
    name = req.stored_as or (dep.name if dep else None)
    if req.trigger is not None:
        result.trigger = req.trigger
    saved = None
    if store is not None:
        saved = store.save_diagnosis(result, snap, deployment=name)
    elif req.save:
        from advisor.store import open_store

        with open_store(settings.database_url) as opened:
            saved = opened.save_diagnosis(result, snap, deployment=name)
    return DiagnoseOutcome(result, snap, dep, saved, name, tuple(ran))


def watched_request(watched: WatchedDeployment) -> DiagnoseRequest:
    """A watched deployment (advisor.yaml) as a request: its Prometheus with its credentials, its
    window, SLOs and rules; its spec only for the model's facts and price (no experiments)."""
    return DiagnoseRequest(
        source=Source(prom_url=watched.prom_url, window=watched.window, model=watched.model,
                      auth=getattr(watched, "_auth", None), prom_option=f"{watched.name}.prom_url",
                      window_option=f"{watched.name}.window"),
        slo=watched.slo, rules_config=watched.rules_config, deployment=watched.deployment,
        deployment_optional=True, prices=((watched.cost, f"advisor.yaml ({watched.name})"),),
        stored_as=watched.name)


def diagnose_watched(watched: WatchedDeployment, store: Store, alerts_out: AlertsOut | None = None,
                     trigger: Trigger | None = None) -> DiagnoseOutcome:
    """A watched deployment diagnosed and saved, as every front door of `advisor serve` does it (the
    dashboard's button, an Alertmanager notification, the schedule); its findings posted to
    Alertmanager where advisor.yaml names one."""
    req = watched_request(watched)
    if trigger is not None:
        req = replace(req, trigger=trigger)
    saved = diagnose(req, store=store)
    if alerts_out is not None:
        alerts_out.post(watched, saved.diagnosis, saved.saved_id)
    return saved
