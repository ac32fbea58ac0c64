"""Start and stop the real vLLM CPU engine serving the tiny model, for demos and tests."""

from __future__ import annotations

import atexit
import subprocess
import time
from pathlib import Path
from typing import Mapping, Sequence

from advisor import child_env, children, engine_process
from advisor.cores import isolate_engine_core
from advisor.errors import AdvisorError
from advisor.localstack import paths

HOST = "127.0.0.1"

# Engines still running when the interpreter exits (an uncaught error, Ctrl-C in a test run):
# stopped at exit so that no orphan keeps 1 GiB of KV cache and a port.
_live: set["LocalEngine"] = set()


@atexit.register
def _stop_leftovers() -> None:
    for engine in list(_live):
        engine.stop()


class EngineError(AdvisorError, RuntimeError):
    """The engine could not be started, or died before it became healthy."""


class LocalEngine:
    """One `vllm.entrypoints.openai.api_server` process in its own process group.

    vLLM forks an engine-core process; signalling the whole group stops both.
    """

    # What a deployment spec of this engine says (advisor/localstack/deployment.py): its dialect,
    # how many words of command() launch it (the rest are its args), and the environment it needs.
    engine_kind = "vllm"
    launch_words = 3
    spec_env: Mapping[str, str] = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}

    def __init__(
        self,
        port: int | None = None,
        max_num_seqs: int | None = None,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        log_dir: Path | str | None = None,
        isolate_engine_core: bool = True,
        model: Path | str | None = None,
        served_model_name: str = paths.SERVED_MODEL_NAME,
    ) -> None:
        self.port = port or paths.free_port()
        self.model = Path(model) if model else paths.tiny_model_dir()
        self.served_model_name = served_model_name
        self.max_num_seqs = max_num_seqs
        self.extra_args = list(extra_args)
        self.env = dict(env or {})
        self.log_dir = Path(log_dir) if log_dir else paths.log_dir()
        # On by default: on the small CPU hosts this stack runs on, an unpinned engine core starves
        # the API server (advisor/cores.py), and the numbers would be the host's, not the engine's.
        self.isolate_engine_core = isolate_engine_core
        self.placement: str | None = None
        self.log_path: Path | None = None
        self.proc: subprocess.Popen | None = None
        self.started_at: float | None = None
        self.healthy_after_s: float | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def target(self) -> str:
        """host:port, as a Prometheus scrape target."""
        return f"{HOST}:{self.port}"

    def command(self) -> list[str]:
        cmd = [
            str(paths.engine_python()), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model),
            "--served-model-name", self.served_model_name,
            "--max-model-len", "2048",
            "--enforce-eager",
            "--dtype", "bfloat16",
            "--host", HOST,
            "--port", str(self.port),
        ]
        if self.max_num_seqs is not None:
            cmd += ["--max-num-seqs", str(self.max_num_seqs)]
        return cmd + self.extra_args

    def _environment(self) -> dict[str, str]:
        # None of the advisor's secrets, nor its PYTHONPATH (it would shadow the engine venv's packages).
        return child_env.for_child({"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", **self.env})

    name = "vLLM engine"  # in messages
    log_prefix = "engine"

    def _check_installed(self) -> None:
        python, model = paths.engine_python(), self.model
        if not python.exists():
            raise EngineError(f"engine venv not found at {python.parent.parent}: run scripts/setup.sh")
        if not (model / "config.json").exists():
            raise EngineError(f"model not found at {model}: run scripts/setup.sh")

    def start(self) -> "LocalEngine":
        if self.proc is not None:
            raise EngineError("engine already started")
        self._check_installed()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.log_dir / f"{self.log_prefix}-{self.port}-{time.strftime('%Y%m%d-%H%M%S')}.log"
        self.proc = children.spawn(self.command(), self.log_path, env=self._environment())
        self.started_at = time.monotonic()
        _live.add(self)
        return self

    def _failure(self, headline: str) -> EngineError:
        tail = engine_process.log_tail(self.log_path, 20)
        return EngineError(f"{headline} (log: {self.log_path}); last 20 lines:\n"
                           + ("\n".join(tail).rstrip() if tail is not None else "(no log)"))

    def wait_healthy(self, timeout: float = 240) -> "LocalEngine":
        if self.proc is None:
            raise EngineError("engine not started: call start() first")
        started = engine_process.wait_healthy(self.proc, self.url, "/health", timeout)
        if started == "exited":
            _live.discard(self)
            raise self._failure(f"{self.name} on port {self.port} exited with code {self.proc.returncode} before it "
                                "became healthy")
        if started == "late":
            self.stop()
            raise self._failure(f"{self.name} on port {self.port} not healthy after {timeout:.0f} s; stopped it")
        self.healthy_after_s = time.monotonic() - self.started_at
        if self.isolate_engine_core:
            self.placement = isolate_engine_core(self.proc.pid)
        return self

    def stop(self, grace: float = 20) -> None:
        proc, self.proc = self.proc, None
        _live.discard(self)
        if proc is not None:
            # Its whole group (start_new_session): vLLM's API server can exit before its engine-core
            # child, so the group is swept too, and no straggler keeps a port and its KV cache.
            children.stop(proc, grace, group=True, kill_wait=10, group_wait=5, what=self.name)

    def __enter__(self) -> "LocalEngine":
        self.start()
        try:
            return self.wait_healthy()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()


class LlamaServer(LocalEngine):
    """llama.cpp's `llama-server --metrics` serving a GGUF file (scripts/setup-llamacpp.sh builds both),
    the second real engine. One process: its slots (`-np`, the max_num_seqs of this engine) share
    one KV cache of `--ctx-size` cells."""

    name = "llama-server"
    log_prefix = "llama-server"
    engine_kind = "llamacpp"
    launch_words = 1
    spec_env: Mapping[str, str] = {}

    def __init__(self, port: int | None = None, max_num_seqs: int | None = 2, extra_args: Sequence[str] = (),
                 model: Path | str | None = None, served_model_name: str = paths.SERVED_MODEL_NAME,
                 log_dir: Path | str | None = None, threads: int = 2, ctx_size: int = 4096) -> None:
        super().__init__(port=port, max_num_seqs=max_num_seqs, extra_args=extra_args, log_dir=log_dir,
                         isolate_engine_core=False, model=model or paths.tiny_gguf("Q8_0"),
                         served_model_name=served_model_name)
        self.threads, self.ctx_size = threads, ctx_size

    def command(self) -> list[str]:
        return [str(paths.llama_cpp_bin("llama-server")), "-m", str(self.model), "--alias", self.served_model_name,
                "--host", HOST, "--port", str(self.port), "--metrics", "--ctx-size", str(self.ctx_size),
                "-np", str(self.max_num_seqs or 1), "-t", str(self.threads), *self.extra_args]

    def _environment(self) -> dict[str, str]:
        return child_env.for_child(self.env)

    def _check_installed(self) -> None:
        binary = paths.llama_cpp_bin("llama-server")
        if not binary.exists():
            raise EngineError(f"llama-server not found at {binary}: run scripts/setup.sh")
        if not self.model.is_file():
            raise EngineError(f"model not found at {self.model}: run scripts/setup.sh")
