"""The deployment spec of a LocalEngine, so that experiments can launch its candidate."""

from __future__ import annotations

from pathlib import Path

import yaml

from advisor.localstack import paths
from advisor.localstack.engine import HOST, LocalEngine


def deployment_spec(engine: LocalEngine, arms: str = "parallel", candidate_port: int | None = None,
                    name: str = "local-cpu-vllm", owns_process: bool = False, baseline_replica: bool = False,
                    candidate_replicas: int = 1) -> dict:
    """owns_process: the advisor may stop this engine and restart the baseline in its place (needed
    by arms: sequential, whose candidate takes the engine's port). baseline_replica: parallel arms
    compare the candidate with a fresh baseline replica on a port of its own, not with this engine.
    candidate_replicas: free ports for this many candidate replicas from candidate_port up."""
    argv = engine.command()
    i = argv.index("--port")
    n = engine.launch_words
    args = argv[n:i] + argv[i + 2:]
    local = {"command": argv[:n], "args": args, "env": {**engine.spec_env, **engine.env},
             "host": HOST, "port": engine.port, "arms": arms, "start_timeout_s": 300,
             "isolate_engine_core": engine.isolate_engine_core, "owns_process": owns_process}
    if arms == "parallel":
        local["candidate_port"] = candidate_port or paths.free_port(candidate_replicas)
        if baseline_replica:
            local["baseline_port"] = paths.free_port()
    return {"name": name, "engine": engine.engine_kind, "model": paths.SERVED_MODEL_NAME, "launcher": "local", "local": local}


def write_deployment(engine: LocalEngine, path: Path, **kw) -> Path:
    path.write_text(yaml.safe_dump(deployment_spec(engine, **kw), sort_keys=False))
    return path
