"""Where scripts/setup-engine.sh puts the engine and the tiny model (keep the two in step)."""

import os
from pathlib import Path

SERVED_MODEL_NAME = "tiny-llama"


def advisor_home() -> Path:
    return Path(os.environ.get("ADVISOR_HOME") or Path.home() / ".cache" / "llm-advisor")


def engine_venv() -> Path:
    return Path(os.environ.get("ADVISOR_ENGINE_VENV") or advisor_home() / "engine-venv")


def engine_python() -> Path:
    return engine_venv() / "bin" / "python"


def tiny_model_dir(tokenizer: str = "words") -> Path:
    """The tiny model; with tokenizer "pieces" or "chars", its twin whose tokenizer has no whole-word
    tokens (scripts/build_tiny_model.py --tokenizer), built beside it."""
    base = Path(os.environ.get("ADVISOR_TINY_MODEL") or advisor_home() / "tiny-llama")
    return base if tokenizer == "words" else base.with_name(f"{base.name}-{tokenizer}")


def log_dir() -> Path:
    return advisor_home() / "logs"


def free_port() -> int:
    """A port the kernel just handed out; a small race remains until the server binds it."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
