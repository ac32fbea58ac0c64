"""From a deployment, a mechanism and a value to a validated Design and a ready Launcher."""

from __future__ import annotations

import json
from pathlib import Path

from advisor import knobs
from advisor.errors import AdvisorError
from advisor.experiments.deployment import Deployment
from advisor.experiments.design import (
    SECONDARY,
    SIGNAL_READOUT,
    Design,
    Guardrails,
    block_order,
    default_workload,
    new_id,
)
from advisor.experiments.journal import Journal
from advisor.experiments.launchers import EndpointsLauncher, LocalLauncher
from advisor.workload.plan import plan
from advisor.workload.spec import Workload


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


def default_value(mechanism: str, engine: str, base_args: list[str]):
    """The usual candidate when none is given: flip a switch, double a limit."""
    current = knobs.current_value(base_args, mechanism, engine)
    flips = {"prefix_caching": True, "chunked_prefill": True, "enforce_eager": True}
    if mechanism in flips:
        return not current if isinstance(current, bool) else flips[mechanism]
    if mechanism == "max_num_seqs" and current:
        return int(current) * 4
    if mechanism == "kv_cache_dtype":
        return "fp8"
    raise DesignError(f"{mechanism}: give --value (no default candidate for this mechanism)")


def readout(mechanism: str, override: str | None) -> tuple[str, str]:
    if override:
        if override not in SIGNAL_READOUT:
            raise DesignError(f"unknown readout {override!r}; known: {', '.join(SIGNAL_READOUT)}")
        return SIGNAL_READOUT[override]
    knob = knobs.KNOBS[mechanism]
    primary = getattr(knob, "primary", None)
    if primary is not None:
        return (primary.metric, primary.statistic) if hasattr(primary, "metric") else tuple(primary)
    return ("ttft", "p95")


def default_concurrency(mechanism: str, value: object) -> int:
    """8 in flight; for a batch-slot limit, as many as the candidate's slots, so that only the
    baseline queues and the difference is the queue the knob removes."""
    if mechanism == "max_num_seqs" and isinstance(value, int) and not isinstance(value, bool):
        return min(max(8, value), 256)
    return 8


def design(dep: Deployment, mechanism: str, value_text: str | None, workload: Workload | None, *,
           blocks: int = 4, block_requests: int = 32, concurrency: int | None = None, warmup: int = 16,
           readout_signal: str | None = None, seed: int = 0, guardrails: Guardrails | None = None) -> Design:
    """Validates everything (knob, value, engine support) before anything starts."""
    if mechanism not in knobs.KNOBS:
        raise DesignError(f"unknown mechanism {mechanism!r}; known: {', '.join(knobs.KNOBS)}")
    if blocks < 2:
        raise DesignError("at least 2 blocks per arm: the block is the unit of replication")
    base_args = list(dep.local.args) if dep.local else []
    value = parse_value(value_text)
    if value is None:
        value = default_value(mechanism, dep.engine, base_args)
    cand_args, cand_env = knobs.apply(base_args, mechanism, dep.engine, value)
    if dep.launcher == "local" and cand_args == base_args and not cand_env:
        raise DesignError(f"{mechanism}={value!r} is what the baseline already runs: nothing to compare")
    if concurrency is None:
        concurrency = default_concurrency(mechanism, value)
    w = workload or default_workload(mechanism, block_requests, concurrency, seed)
    requests = plan(w)
    knob = knobs.KNOBS[mechanism]
    primary = readout(mechanism, readout_signal)
    return Design(id=new_id(), deployment=dep, mechanism=mechanism, value=value, baseline_args=base_args,
                  candidate_args=cand_args, candidate_env=cand_env, workload=w, requests=requests,
                  blocks_per_arm=blocks, order=block_order(blocks), warmup_requests=warmup, primary=primary,
                  secondary=[m for m in SECONDARY if m != primary], guardrails=guardrails or Guardrails(),
                  numerics=bool(getattr(knob, "changes_numerics", False)),
                  fails_means=getattr(knob, "fails_means", "") or "")


def launcher_for(d: Design, journal: Journal, log_dir: Path):
    if d.deployment.launcher == "endpoints":
        return EndpointsLauncher(d.deployment)
    return LocalLauncher(d.deployment, d.candidate_args, d.candidate_env, journal, d.id, log_dir)
