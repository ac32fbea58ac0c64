"""Ranking checks: evidence strength times the map's order. Supply and demand first, scheduling and
memory next, the compute path last; a compute-path check is held back, with the reason, while the
deployment is queueing or rejecting requests, because a queue bottleneck mistaken for a compute
bottleneck gives a fake optimisation (map: "Fix supply and demand first")."""

from __future__ import annotations

from advisor.diagnosis.model import Check, Diagnosis
from advisor.knobs import already_by_default, already_candidate
from advisor.units import fmt
from probes import Snapshot

STAGE_WEIGHT = {"supply_demand": 1.0, "scheduling_memory": 0.6, "compute_path": 0.3}
STAGE_NAME = {"supply_demand": "supply and demand", "scheduling_memory": "scheduling and memory",
              "compute_path": "the compute path"}
# A finding's weight on its checks' scores (a warning's checks also sort below every breach's).
SEVERITY_WEIGHT = {"warning": 1.0, "low": 1.25, "moderate": 1.5, "severe": 1.75, "critical": 2.0}
UNKNOWN_STRENGTH = 0.25  # a check whose evidence is missing still ranks, below well-evidenced ones
QUEUE_WAITING = 1.0  # average waiting requests at which the deployment counts as queueing


def queue_pressure(snap: Snapshot) -> str | None:
    """Why supply and demand is still the bottleneck, or None."""
    waiting = snap.value("requests_waiting_avg")
    rejected = snap.value("admission_rejections_per_s")
    if waiting is not None and waiting >= QUEUE_WAITING:
        return f"requests are queueing (requests_waiting_avg = {waiting:.2g})"
    if rejected:
        return f"admission is rejecting requests ({fmt(rejected, 'req/s')})"
    return None


def _v1_floor(snap: Snapshot) -> str | None:
    """A lower bound of a vLLM whose version was not read (through Prometheus) but whose metrics are
    V1's (probes/prometheus.py): V1 is vLLM's engine from 0.8.0 on, where the catalog's V1 defaults begin."""
    return "0.8.0" if snap.engine.kind == "vllm" and snap.engine.generation == "V1" else None


def rank(diag: Diagnosis, snap: Snapshot) -> None:
    pressure = queue_pressure(snap)
    checks: list[Check] = []
    warned: set[int] = set()
    for f in diag.findings:
        sev = SEVERITY_WEIGHT[f.severity]
        for c in f.checks:
            strength = c.strength if c.strength is not None else \
                (c.strength_if_missing if c.strength_if_missing is not None else UNKNOWN_STRENGTH)
            c.score = round(strength * STAGE_WEIGHT[c.stage] * sev, 4)
            why = [f"{STAGE_NAME[c.stage]} (weight {STAGE_WEIGHT[c.stage]:g})",
                   f"evidence strength {strength:.2f}" + ("" if c.strength is not None else f" assumed: {c.reason}"),
                   f"{f.severity} {f.rule_id}"]
            c.already = already_candidate(c.mechanism, snap.engine.config)
            if c.already:
                why.append(f"{c.already} (read from {snap.engine.config_source}): not recommended as 'turn it on'")
            else:
                floor = None if snap.engine.version else _v1_floor(snap)
                c.already = already_by_default(c.mechanism, c.direction, snap.engine.kind,
                                               snap.engine.version or floor, snap.engine.config,
                                               "vLLM's V1 engine (its metrics are V1's)" if floor else None)
                if c.already:
                    why.append(f"{c.already}: not recommended as 'turn it {c.direction}'")
            if c.stage == "compute_path" and pressure:
                c.held_back = True
                why.append(f"held back: {pressure}; fix supply and demand before comparing kernels, "
                           "quantization or speculative schemes")
            c.reason = "; ".join(why)
            checks.append(c)
            if f.severity == "warning":
                warned.add(id(c))
    # A breach outranks a warning whatever the scores: fix what is broken before what is near.
    checks.sort(key=lambda c: (c.held_back, c.already is not None, id(c) in warned, -c.score))
    for i, c in enumerate(checks, 1):
        c.rank = i
