"""From a deployment, a mechanism and a value to a validated Design and a ready Launcher."""

from __future__ import annotations

import json
from pathlib import Path

from advisor import knobs
from advisor.errors import AdvisorError
from advisor.experiments.arms import model_swap
from advisor.experiments.design import planning
from advisor.experiments.design.deployment import Deployment
from advisor.experiments.design.capacity import CAPACITY, CAPACITY_SIGNAL, CapacityPlan
from advisor.experiments.design.plan import (
    SIGNAL_READOUT,
    Design,
    Guardrails,
    Stopping,
    block_order,
    default_workload,
    fresh_seed,
    new_id,
    with_seed,
)
from advisor.experiments.arms.engine_state import EngineState, observe
from advisor.experiments.arms.journal import Journal
from advisor.experiments.arms.endpoints import EndpointsLauncher
from advisor.experiments.arms.kube import KubeLauncher, target_args, target_replicas
from advisor.experiments.arms.local import LocalLauncher
from advisor.workload.plan import plan, planned_count
from advisor.workload.spec import Workload
from advisor.experiments.arms import room
from advisor.knobs.candidates import Current
from advisor.knobs.candidates import shown


class DesignError(AdvisorError, ValueError):
    pass


def parse_value(text: str | None):
    """CLI text to a value: JSON where it parses (8, true, 0.9, {"k": 1}), else the text itself."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # not JSON, nested too deeply, an integer of 5000 digits
        return text


def default_value(mechanism: str, engine: str, base_args: list[str], direction: str | None = None,
                  state: EngineState | None = None, argv_known: bool = True):
    """The candidate when none is given: from the baseline's effective value (its argv, else what
    the engine reveals, else the catalog's default for its version) in the direction the check
    prescribes (None: the catalog's default direction for the knob). DesignError when there is no
    automatic candidate (the catalog's reason) or when it is what the baseline already runs."""
    state = state or EngineState()
    current = knobs.effective_value(base_args, mechanism, engine, state.config, state.version, argv_known,
                                    state.platform)
    try:
        value = knobs.default_candidate(mechanism, direction, current)
    except knobs.KnobError as e:
        raise DesignError(str(e)) from None
    _refuse_same(mechanism, value, current)
    return value


def _refuse_same(mechanism: str, value, current) -> None:
    """A candidate whose effective value is the baseline's would be an A/A run labelled as a test."""

    if not current.known:
        return
    knob = knobs.KNOBS[mechanism]
    try:
        same = knobs.validate(mechanism, value) == current.value
    except knobs.KnobError:
        return
    if same:
        raise DesignError(f"{mechanism} is already {shown(knob, current.value)} {current.where}: nothing to test")


def readout(mechanism: str | None, override: str | None) -> tuple[str, str]:
    """The primary: the override (a signal name), else the knob's catalog primary, else TTFT p50
    (an A/A run's, where no knob names one)."""
    if override:
        if override not in SIGNAL_READOUT:
            raise DesignError(f"unknown readout {override!r}; known: {', '.join([*SIGNAL_READOUT, CAPACITY_SIGNAL])}")
        return SIGNAL_READOUT[override]
    if mechanism is None:
        return ("ttft", "p50")
    knob = knobs.KNOBS[mechanism]
    primary = getattr(knob, "primary", None)
    if primary is not None:
        return (primary.metric, primary.statistic) if hasattr(primary, "metric") else tuple(primary)
    return ("ttft", "p95")


def secondary_readouts(knob, primary: tuple[str, str]) -> list[tuple[str, str]]:
    """The knob's own catalog readouts besides the primary (its catalog primary too, when --readout
    or a check chose another one), in catalog order, without repeats."""
    out: list[tuple[str, str]] = []
    for r in ((knob.primary,) if knob.primary else ()) + tuple(knob.secondary):
        pair = (r.metric, r.statistic)
        if pair != tuple(primary) and pair not in out:
            out.append(pair)
    return out


def effective_guardrails(dep: Deployment, *, max_duration_s: float | None = None, max_requests: int | None = None,
                         max_error_rate: float | None = None) -> Guardrails:
    """Each guardrail from the command line, else from the deployment's `guardrails:` section, else
    the default."""
    spec = getattr(dep, "guardrails", None)
    g = Guardrails()
    for name, given in (("max_duration_s", max_duration_s), ("max_requests", max_requests),
                        ("max_error_rate", max_error_rate)):
        value = given if given is not None else (getattr(spec, name, None) if spec is not None else None)
        if value is not None:
            setattr(g, name, value)
    return g


def default_concurrency(mechanism: str, value: object) -> int:
    """8 in flight; for a batch-slot limit, as many as the candidate's slots, so that only the
    baseline queues and the difference is the queue the knob removes."""
    if mechanism == "max_num_seqs" and isinstance(value, int) and not isinstance(value, bool):
        return min(max(8, value), 256)
    if mechanism == "scheduling_policy":
        return 16  # a queue deep enough that the order it is served in matters
    return 8


def design(dep: Deployment, mechanism: str | None, value_text: str | None, workload: Workload | None, *,
           blocks: int | None = None, block_requests: int | None = None, concurrency: int | None = None,
           warmup: int = 16, readout_signal: str | None = None, seed: int | None = None,
           guardrails: Guardrails | None = None, direction: str | None = None, state: EngineState | None = None,
           sequential: bool = True, effect: float = planning.DEFAULT_EFFECT, aa: bool = False,
           calibration=None, baseline: str = "auto", capacity: CapacityPlan | None = None) -> Design:
    """Validates everything (knob, value, engine support) and plans the blocks, before anything starts.

    direction: what the check prescribes (up, down, on, off; None: the catalog's default direction
    for the knob), used when no value is given. state: what the baseline engine reveals (version,
    cache_config_info); None reads it from the deployment's baseline within a short deadline.
    seed: the workload's prompts; None draws a fresh one per experiment (from its id) unless the
    given workload pins one, so that no engine has seen the prompts before.
    blocks, block_requests: the maximum blocks per arm and the requests per block; None plans them
    (advisor/experiments/design/planning.py) for `effect` on the primary from `calibration` (the target's
    A/A calibration, else the conservative default). sequential: looks after every pair of blocks
    (stop at the first decisive one), else one look at the maximum.
    aa: a deliberate A/A run: the candidate is the baseline's own configuration (`mechanism` may be
    None), to measure the target's noise. capacity: a capacity experiment (readout "capacity"): the
    arms searched for their capacity at its SLO, in trials of its size instead of blocks."""
    if aa:
        # With endpoints, the candidate URL is the baseline's own or a replica of its configuration
        # (the launcher's preflight refuses two arms that reveal different configurations): an A/A
        # run between the two environments that an A/B will compare says how far apart they are.
        value, cand_env, knob, models = None, {}, None, {}
        base_args = baseline_args(dep)
        cand_args = list(base_args)
    else:
        if mechanism not in knobs.KNOBS:
            raise DesignError(f"unknown mechanism {mechanism!r}; known: {', '.join(knobs.KNOBS)}")
        value, base_args, cand_args, cand_env, state, models = _candidate(dep, mechanism, value_text, direction,
                                                                          state)
        knob = knobs.KNOBS[mechanism]
    if blocks is not None and blocks < 2:
        raise DesignError("at least 2 blocks per arm: the block is the unit of replication")
    if concurrency is None:
        concurrency = default_concurrency(mechanism, value) if mechanism else 8
    exp_id = new_id()
    fresh = fresh_seed(exp_id) if seed is None else seed
    if (readout_signal == CAPACITY_SIGNAL) != (capacity is not None):
        raise DesignError("the capacity readout needs its plan (the SLO file), and a plan its readout")
    primary = CAPACITY if capacity else readout(mechanism if not aa else None, readout_signal)
    w = with_seed(workload, fresh, pinned=seed is not None) if workload is not None else \
        default_workload(mechanism or "aa", block_requests or planning.CONSERVATIVE_REQUESTS, concurrency, fresh)
    if mechanism == "scheduling_policy" and value == "priority" and not aa \
            and len({b.priority for b in w.buckets}) < 2:
        raise DesignError(f"scheduling_policy priority: every request of the workload {w.name!r} has the same "
                          "priority, so a priority scheduler has nothing to reorder (an A/A run labelled as a test); "
                          "give a workload whose buckets set different priorities, or none for the knob's own "
                          "two-class workload")
    guardrails = guardrails or effective_guardrails(dep)
    if capacity is not None:  # one trial's requests, warmup first: no blocks to plan
        n = capacity.trial_requests + capacity.warmup_requests
        max_blocks, stopping, plan_lines = 1, Stopping(), []
        if guardrails.max_requests // 2 < n:  # each arm's search gets half the budget
            raise DesignError(f"a request budget of {guardrails.max_requests} leaves each arm's search "
                              f"{guardrails.max_requests // 2} requests, less than one trial ({capacity.trial_requests} "
                              f"tallied and {capacity.warmup_requests} warmup); allow at least {2 * n} "
                              "(--max-requests)")
    else:
        n = block_requests or w.requests or planned_count(w)
        noise = (calibration.noise(*primary) if calibration is not None else None) or planning.conservative(primary[1])
        try:
            p = planning.plan(primary[1], noise, requests_per_block=n, requests_fixed=block_requests is not None,
                              max_blocks=blocks, effect=effect, sequential=sequential)
        except planning.PlanError as e:
            raise DesignError(str(e)) from None
        n, max_blocks, stopping, plan_lines = p.requests_per_block, p.max_blocks, p.stopping, p.describe()
    if n != planned_count(w):
        w = w.model_copy(update={"requests": n, "duration_s": None})
    requests = plan(w)
    if state is not None and state.max_model_len:
        from advisor.workload.context import check_fits

        check_fits(requests, state.max_model_len, "the baseline's max_model_len, read from its /v1/models")
    secondary = [] if capacity else secondary_readouts(knob, primary) if knob else _aa_secondaries(primary)
    return Design(id=exp_id, deployment=dep, mechanism=mechanism or "aa", value=value, baseline_args=base_args,
                  candidate_args=cand_args, candidate_env=cand_env, workload=w, requests=requests,
                  blocks_per_arm=max_blocks, order=block_order(max_blocks), warmup_requests=warmup,
                  primary=primary, secondary=secondary,
                  guardrails=guardrails,
                  numerics=bool(getattr(knob, "changes_numerics", False)),
                  fails_means=getattr(knob, "fails_means", "") or "",
                  watch=tuple(getattr(knob, "watch", ()) or ()),
                  direction=(direction or knob.candidate.default) if knob and value_text is None else None,
                  seed_pinned=seed is not None or (workload is not None and "seed" in workload.model_fields_set),
                  stopping=stopping, plan=plan_lines, aa=aa, models=models, baseline=baseline, capacity=capacity,
                  replicas=({"baseline": _replica_count(dep), "candidate": int(value)}
                            if knob and (dep.local or dep.kubernetes) and knob.engine(dep.engine).kind == "deployment"
                            else {}))


def _replica_count(dep: Deployment) -> int:
    return dep.local.replicas if dep.local else target_replicas(dep.kubernetes)


def _refuse_no_room_for_ranks(dep: Deployment, size: int, cand_args: list[str], state: EngineState | None) -> None:
    tp = knobs.current_value(cand_args, "tensor_parallel", dep.engine) if knobs.supported(
        "tensor_parallel", dep.engine) else None
    why = room.data_parallel_refusal(dep.engine, state.platform if state else None, size, int(tp or 1),
                                     room.Host.this())
    if why:
        raise DesignError(f"no room on this host for data_parallel {size}: {why}")


def _aa_secondaries(primary: tuple[str, str]) -> list[tuple[str, str]]:
    """An A/A run reads every headline readout: any verdict of difference among them is a false one."""
    wanted = [("ttft", "p95"), ("tpot", "p50"), ("e2e", "p95"), ("output_tokens", "per_s")]
    return [r for r in wanted if r != tuple(primary)]


def _candidate(dep: Deployment, mechanism: str, value_text: str | None, direction: str | None,
               state: EngineState | None):
    """(value, baseline argv, candidate argv, candidate env, engine state, both arms' models): the one
    change, refused when the engine lacks it or when it is what the baseline already runs. A model
    file as the value of a knob that takes one (quantization) swaps the served model: model_swap.py."""
    base_args = baseline_args(dep)
    try:
        path = model_swap.candidate_path(mechanism, value_text)
        if path is not None:
            if dep.launcher != "local":
                raise DesignError(f"{mechanism}: a model-file swap starts the candidate on {path}, which needs the "
                                  "local launcher; with endpoints, serve the candidate model at the candidate URL; "
                                  "on Kubernetes, the model path inside the image: give it as --value of a knob "
                                  "that names a served path, or a second workload as endpoints")
            models = model_swap.layers(base_args, dep.engine, path)  # not a model: refused first
            cand_args = model_swap.swap(base_args, dep.local.command, dep.engine, path)
            return str(path), base_args, cand_args, {}, state, models
    except model_swap.ModelSwapError as e:
        raise DesignError(str(e)) from None
    if not knobs.supported(mechanism, dep.engine):
        raise DesignError(f"{mechanism} is not supported on {dep.engine}: "
                          f"{knobs.KNOBS[mechanism].engine(dep.engine).reason}")
    if knobs.KNOBS[mechanism].engine(dep.engine).kind == "deployment":
        return _replicas(dep, mechanism, value_text, direction, base_args, state)
    if mechanism == "api_server_count" and dep.local and any("vllm.entrypoints.openai.api_server" in part
                                                              for part in dep.local.command):
        # Only `vllm serve` starts the extra API processes; this entry point would take the flag and
        # run one process: an A/A run labelled as a test.
        raise DesignError("api_server_count: the baseline runs vllm.entrypoints.openai.api_server, which serves "
                          "from one process whatever --api-server-count says; launch it with `vllm serve` to test it")
    if direction is not None and direction not in knobs.DIRECTIONS:
        raise DesignError(f"unknown direction {direction!r}; known: {', '.join(knobs.DIRECTIONS)}")
    value = parse_value(value_text)
    if state is None and (value is None or (dep.launcher == "local"
                                             and knobs.current_value(base_args, mechanism, dep.engine) is None)):
        state = observe(dep)  # the engine's defaults decide what the baseline runs
    local = dep.launcher == "local"
    argv_known = dep.launcher in ("local", "kubernetes")  # the cluster's own record of the container's args
    if local and state is not None and state.platform is None:
        # A diagnosis's state comes from the engine's metrics, which do not say which build it runs.
        from dataclasses import replace

        from advisor.experiments.arms.engine_state import installed

        state = replace(state, platform=installed(dep)[1])
    if value is None:
        value = default_value(mechanism, dep.engine, base_args, direction, state, argv_known=argv_known)
    else:
        value = knobs.validate(mechanism, value)
        state = state or EngineState()
        _refuse_same(mechanism, value, knobs.effective_value(base_args, mechanism, dep.engine, state.config,
                                                             state.version, argv_known=argv_known,
                                                             platform=state.platform))
    cand_args, cand_env = knobs.apply(base_args, mechanism, dep.engine, value)
    if mechanism == "data_parallel" and local:
        _refuse_no_room_for_ranks(dep, int(value), cand_args, state)
    if argv_known and cand_args == base_args and not cand_env:
        raise DesignError(f"{mechanism}={value!r} is what the baseline already runs: nothing to compare")
    return value, base_args, cand_args, cand_env, state, {}


def _replicas(dep: Deployment, mechanism: str, value_text: str | None, direction: str | None,
              base_args: list[str], state: EngineState | None):
    """A deployment-level count: the same argv on every replica, N (the spec's local.replicas) vs
    the candidate's count. With endpoints the arms are whatever serves the two URLs."""

    if dep.launcher == "kubernetes":
        current = Current(target_replicas(dep.kubernetes), True,
                          f"in the cluster ({dep.kubernetes.workload}'s spec.replicas)")
    elif dep.launcher != "local":
        if value_text is None:
            raise DesignError(f"{mechanism}: with the endpoints launcher the candidate URL serves the candidate's "
                              "replicas, and their count cannot be read from it: give --value")
        return knobs.validate(mechanism, parse_value(value_text)), base_args, list(base_args), {}, state, {}
    else:
        current = Current(dep.local.replicas, True, "in the deployment spec (local.replicas)")
    if direction is not None and direction not in knobs.DIRECTIONS:
        raise DesignError(f"unknown direction {direction!r}; known: {', '.join(knobs.DIRECTIONS)}")
    if value_text is None:
        try:
            value = knobs.default_candidate(mechanism, direction, current)
        except knobs.KnobError as e:
            raise DesignError(str(e)) from None
    else:
        value = knobs.validate(mechanism, parse_value(value_text))
    _refuse_same(mechanism, value, current)
    return value, base_args, list(base_args), {}, state, {}


def baseline_args(dep: Deployment) -> list[str]:
    """The baseline's engine arguments: the spec's (local), the cluster's record of the target's
    engine container (kubernetes), none known (endpoints)."""
    if dep.local:
        return list(dep.local.args)
    if dep.kubernetes:
        try:
            return target_args(dep.kubernetes)
        except AdvisorError as e:
            raise DesignError(str(e)) from None
    return []


def launcher_for(d: Design, journal: Journal, log_dir: Path):
    if d.deployment.launcher == "endpoints":
        return EndpointsLauncher(d.deployment, d.mechanism, aa=d.aa)
    if d.deployment.launcher == "kubernetes":
        return KubeLauncher(d.deployment, d.baseline_args, d.candidate_args, journal, d.id,
                            replicas=d.replicas or None, mechanism=d.mechanism)
    return LocalLauncher(d.deployment, d.candidate_args, d.candidate_env, journal, d.id, log_dir,
                         candidate_replicas=d.replicas.get("candidate"), baseline=d.baseline)
