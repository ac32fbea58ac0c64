"""Where the served model's config.json is: a local folder (the deployment's --model, or the root
that vLLM's /v1/models reports), or a Hugging Face hub id found in this host's cache
($HF_HUB_CACHE, $HF_HOME/hub, or ~/.cache/huggingface/hub: models--ORG--NAME/snapshots/REV/)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence
from advisor import net
from advisor.models.structure import ModelConfigError
from probes.errors import ProbeError
from urllib.parse import urlsplit


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


def model_position(args: list[str], flags: Sequence[str]) -> tuple[int, str] | None:
    """(index in args, the model's text) of the model an argv serves: one of the engine's model
    flags' value (`-m X`, `--model=X`), or vLLM's positional `serve X`; None when it names none."""
    for i, a in enumerate(args):
        if a in flags and i + 1 < len(args):
            return i + 1, args[i + 1]
        for f in flags:
            if f.startswith("--") and a.startswith(f + "="):
                return i, a.split("=", 1)[1]
    if "serve" in args:
        i = args.index("serve") + 1
        if i < len(args) and not args[i].startswith("-"):
            return i, args[i]
    return None


def model_args(argv: list[str], flags: Sequence[str] | None = None) -> str | None:
    """The model an engine's argv serves, by the engine's model flags (the catalog's model_flags);
    without them, vLLM's --model, or llama.cpp's -m / --model for a llama.cpp binary only
    (`python -m` names a module)."""
    if flags is None:
        flags = ("-m", "--model") if argv and Path(argv[0]).name.startswith("llama-") else ("--model",)
    found = model_position(argv, flags)
    return found[1] if found else None


def weights_path(model: str) -> Path | None:
    """The weights a model name stands for on this host: a GGUF file, a local folder, or a cached hub
    id's snapshot folder; None when none is here."""
    local = Path(model).expanduser()
    if local.is_file() or local.is_dir():
        return local
    config = config_path(model)
    return config.parent if config is not None else None


def served_weights(url: str, timeout: float = 10.0) -> tuple[str, str]:
    """(the path the engine at `url` serves its model from, where that came from): vLLM's
    /v1/models `root`, or llama.cpp's /props `model_path`. A path on the engine's host: only read
    here when the engine runs here. Raises ModelConfigError in one line."""

    from probes.http import client, request

    base = url.rstrip("/")
    found: list[tuple[str, str]] = []
    problems = []
    with client(net.config("engine", timeout=timeout, url=url)) as c:
        for path, pick in (("/v1/models", _roots), ("/props", _props_path)):
            try:
                r = request(c, "GET", base + path, what="engine")
                if r.status_code == 200:
                    found += [(p, f"{base}{path}") for p in pick(r.json())]
                else:
                    problems.append(f"{path} returned HTTP {r.status_code}")
            except (ProbeError, ValueError) as e:
                problems.append(f"{path}: {e}")
            if found:
                break
    if not found:
        why = "; ".join(problems) or "no root in /v1/models, no model_path in /props"
        raise ModelConfigError(f"{base} names no model path ({why})")
    path, source = found[0]
    if (urlsplit(base).hostname or "") not in ("127.0.0.1", "localhost", "::1"):
        raise ModelConfigError(f"{source} says the model is at {path}, a path on the engine's host; run advisor "
                               "model inspect there, or give the path of a copy")
    return path, source


def _roots(body) -> list[str]:
    data = body.get("data") if isinstance(body, dict) else None
    return [m["root"] for m in data or [] if isinstance(m, dict) and isinstance(m.get("root"), str) and m["root"]]


def _props_path(body) -> list[str]:
    path = body.get("model_path") if isinstance(body, dict) else None
    return [path] if isinstance(path, str) and path else []
