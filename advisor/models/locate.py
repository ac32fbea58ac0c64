"""Where the served model's config.json is: a local folder (the deployment's --model, or the root
that vLLM's /v1/models reports), or a Hugging Face hub id found in this host's cache
($HF_HUB_CACHE, $HF_HOME/hub, or ~/.cache/huggingface/hub: models--ORG--NAME/snapshots/REV/)."""

from __future__ import annotations

import os
from pathlib import Path


def hub_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = Path(os.environ["HF_HOME"]) if os.environ.get("HF_HOME") else Path.home() / ".cache" / "huggingface"
    return home / "hub"


def config_path(model: str) -> Path | None:
    """The config.json for a local model folder or a cached hub id; None when neither is here."""
    local = Path(model).expanduser()
    if (local / "config.json").is_file():
        return local / "config.json"
    if model.count("/") != 1 or model.startswith(("/", ".", "~")):
        return None
    repo = hub_cache() / f"models--{model.replace('/', '--')}"
    ref = repo / "refs" / "main"
    snapshots = repo / "snapshots"
    if ref.is_file():
        pinned = snapshots / ref.read_text().strip() / "config.json"
        if pinned.is_file():
            return pinned
    found = sorted(snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime, reverse=True) \
        if snapshots.is_dir() else []
    return found[0] if found else None


def model_args(argv: list[str]) -> str | None:
    """The model an engine's argv serves: vLLM's --model or its positional `serve MODEL`."""
    for i, a in enumerate(argv):
        if a == "--model" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--model="):
            return a.split("=", 1)[1]
    if "serve" in argv:
        i = argv.index("serve")
        if i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            return argv[i + 1]
    return None
