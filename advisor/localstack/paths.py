"""Where scripts/setup-engine.sh puts the engine and the tiny model, and scripts/setup-llamacpp.sh
llama.cpp and the tiny model's GGUF files (keep them in step)."""

import os
from pathlib import Path
import socket

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


def tiny_fp8_dir() -> Path:
    """The tiny model as a serialized FP8 checkpoint (scripts/build_tiny_fp8.py), built beside it."""
    base = tiny_model_dir()
    return base.with_name(f"{base.name}-fp8")


LLAMA_CPP_PYTHON_VERSION = "0.3.36"  # the source package whose vendor/llama.cpp is built
GGUF_QUANTS = ("F16", "Q8_0", "Q4_K_M", "IQ4_XS", "UD-Q4_K_XL")


def llama_cpp_bin(tool: str = "llama-server") -> Path:
    prefix = os.environ.get("ADVISOR_LLAMA_CPP") or advisor_home() / f"llama.cpp-{LLAMA_CPP_PYTHON_VERSION}"
    return Path(prefix) / "bin" / tool


def tiny_gguf(quant: str = "Q8_0") -> Path:
    """The tiny model as a GGUF file: F16, Q8_0, Q4_K_M, IQ4_XS (with an imatrix) or UD-Q4_K_XL."""
    folder = Path(os.environ.get("ADVISOR_TINY_GGUF") or advisor_home() / "tiny-llama-gguf")
    return folder / f"tiny-llama-{quant}.gguf"


def log_dir() -> Path:
    return advisor_home() / "logs"


def free_port(run: int = 1) -> int:
    """A port the kernel just handed out, with the `run - 1` ports above it free too (an arm's
    replicas serve from its port up); a small race remains until the servers bind them."""

    for _ in range(64):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + run - 1 > 65535:
            continue
        try:
            for p in range(port + 1, port + run):
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return port
    raise OSError(f"no run of {run} free ports found")
