"""The structure of the model a diagnosed deployment serves: its config.json (or a GGUF file's
metadata) found from the deployment spec's argv, the root vLLM's /v1/models reports, or the served
name when it is a local folder or a cached hub id. Never fatal: a diagnosis without it says why."""

from __future__ import annotations

from pathlib import Path

from advisor.models.gguf_file import looks_like_gguf
from advisor.models.gguf_inspect import structure_gguf
from advisor.models.locate import config_path, model_args
from advisor.models.structure import ModelConfigError, ModelStructure, read
from urllib.parse import urlsplit


def served_structure(snapshot, deployment=None) -> tuple[ModelStructure | None, str | None]:
    """(structure, None), or (None, why it is not known)."""
    candidates: list[str] = []
    if deployment is not None and deployment.local is not None:
        from advisor.knobs import model_flags

        found = model_args([*deployment.local.command, *deployment.local.args], model_flags(deployment.engine))
        if found:
            candidates.append(found)
    # A root is a path on the engine's host: this host's file of that name is the model only when
    # the engine runs here.
    if _loopback(snapshot.target):
        candidates += snapshot.engine.roots
    candidates += [*([snapshot.model] if snapshot.model else []), *snapshot.engine.models]
    if deployment is not None:
        candidates.append(deployment.model)
    problems = []
    for name in dict.fromkeys(candidates):
        try:
            if looks_like_gguf(Path(name)) and Path(name).is_file():
                return structure_gguf(Path(name)), None
            path = config_path(name)
            if path is not None:
                return read(path), None
        except (OSError, ModelConfigError) as e:  # an unreadable folder, a broken config: try the next
            problems.append(str(e))
    if problems:
        return None, "; ".join(problems)
    shown = ", ".join(dict.fromkeys(candidates)) or "no model name"
    return None, (f"no config.json found for {shown} (a local folder, or a Hugging Face hub id cached on this "
                  "host); pass --deployment with the engine's --model to read the model's structure")


def _loopback(url: str) -> bool:
    return (urlsplit(url).hostname or "") in ("127.0.0.1", "localhost", "::1")


def kv_capacity_tokens(config: dict) -> int | None:
    """The KV cache's size in tokens, as vLLM's cache_config_info reports it."""
    def number(key: str) -> float | None:
        try:
            return float(config[key])
        except (KeyError, TypeError, ValueError):
            return None

    size = number("kv_cache_size_tokens")
    if size:
        return int(size)
    blocks, block = number("num_gpu_blocks"), number("block_size")
    return int(blocks * block) if blocks and block else None
