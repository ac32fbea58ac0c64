"""The manifest written next to every experiment result."""

from __future__ import annotations

from advisor import manifest
from advisor.experiments.design.plan import Design
from advisor.experiments.result import ExperimentResult
from advisor.loadgen.metrics import DEFINITIONS


def experiment_manifest(d: Design, r: ExperimentResult) -> dict:
    w = d.workload
    if d.capacity is not None:  # trials of each arm's search, not blocks
        per_arm = {arm: {"trials": len(c.trials), "requests": c.requests} for arm, c in r.capacity.items()}
    else:
        per_arm = {arm: {"blocks": sum(b.arm == arm for b in r.blocks),
                         "requests": sum(b.requests for b in r.blocks if b.arm == arm)}
                   for arm in ("baseline", "candidate")}
    url = d.deployment.target_url
    return {
        "experiment": d.id,
        "deployment": {"name": d.deployment.name, "engine": d.deployment.engine, "model": d.deployment.model,
                       "launcher": d.deployment.launcher,
                       "arms": d.deployment.local.arms if d.deployment.local else
                       "fresh workloads" if d.deployment.kubernetes else "endpoints"},
        # A Kubernetes experiment's cluster version, the arms' nodes, GPU models, image digests, argv.
        "kubernetes": r.kubernetes or None,
        # From the arms themselves; the hardware is this host's only where the local launcher runs
        # both arms on it.
        "engine_version": (r.arms.get("baseline") or {}).get("version") or manifest.engine_version(url),
        "arms": r.arms,
        "hardware": manifest.machine() if d.deployment.launcher == "local" else
        {"note": "the arms run elsewhere: what they say about themselves is under arms"},
        "mechanism": d.mechanism, "value": repr(d.value), "direction": getattr(d, "direction", None),
        "baseline_argv": d.baseline_args, "candidate_argv": d.candidate_args, "candidate_env": d.candidate_env,
        "replicas": getattr(d, "replicas", None) or None,
        "workload": {"name": w.name, "source": w.source, "buckets": [b.model_dump() for b in w.buckets],
                     "prefix": w.prefix.model_dump() if w.prefix else None, "arrival": w.arrival.model_dump(),
                     "cancellation": w.cancellation.model_dump(), "seed": w.seed,
                     "requests_per_block": len(d.requests)},
        "concurrency_or_rate": (f"concurrency {w.arrival.concurrency}" if w.arrival.kind == "concurrency"
                                else f"{w.arrival.kind} {w.arrival.rate} req/s"),
        "warmup_requests_after_each_start": d.warmup_requests,
        "stopping": {"sequential": d.stopping.sequential, "boundary": d.stopping.boundary, "alpha": d.stopping.alpha,
                     "first_look": d.stopping.first_look, "max_blocks_per_arm": d.blocks_per_arm,
                     "levels": list(d.stopping.levels), "plan": d.plan},
        "looks": [look.model_dump() for look in r.looks],
        "stop_reason": r.stop_reason,
        "restarts": [{"arm": b.arm, "block": b.block + 1, "seconds": b.restart_s} for b in r.blocks
                     if b.restart_s is not None],
        "block_order": [] if d.capacity else [f"{arm}:{b + 1}" for arm, b in d.order],
        "capacity": d.capacity.describe() if d.capacity else None,
        "per_arm": per_arm,
        "load_generator_valid": all(b.generator_valid for b in r.blocks),
        "metric_definitions": DEFINITIONS,
        "judgement": "block is the unit of replication; see each metric's method; equivalence margin 5%; "
                     "secondaries tested only behind a decisive primary, Holm among them, at the last look's level",
        # A fresh seed per experiment (from its id) unless the workload pins one: prompts no engine has seen.
        "seeds": {"workload": w.seed, "workload_seed": "pinned by the workload" if getattr(d, "seed_pinned", False)
                  else "fresh for this experiment"},
    }
