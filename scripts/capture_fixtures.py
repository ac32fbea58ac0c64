"""Capture real /metrics from the live CPU vLLM engine into tests/fixtures/vllm-0.32.0-cpu/.

    .venv/bin/python scripts/capture_fixtures.py [--out DIR]

Re-runnable; overwrites the files it writes (metrics-prefix-t0/t1, metrics-after-restart,
version-prefix.json, models-prefix.json). The engine runs with prefix caching at its default
and a 90% shared-prefix workload; after it, the engine restarts on the same port so the last
capture shows every counter reset against -t1. Local paths are scrubbed from what is saved.
"""

from __future__ import annotations

import argparse
import re
import sys
import threading
import time
from pathlib import Path

import _capture  # scripts/_capture.py: scripts/ is on sys.path when run
from _capture import log, save

from advisor.localstack import LocalEngine, drive_sync, paths

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = dict(requests=100_000, concurrency=8, prompt_words=600, shared_prefix_words=540, max_tokens=64, seed=0)
T1_AFTER_S = 10
LOAD_S = 15


def scrub(text: str) -> str:
    # Keep machine paths out of the repository; "models/tiny-llama" matches the older captures.
    return text.replace(str(paths.tiny_model_dir()), "models/tiny-llama").replace(str(Path.home()), "~")


def get(url: str) -> str:
    return _capture.get(url, scrub)


def counter(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)}\{{[^}}]*\}} (\S+)$", text, re.M)
    if not m:
        raise SystemExit(f"capture has no {name}")
    return float(m.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "vllm-0.32.0-cpu")
    out = ap.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    captures: dict[str, str] = {}

    engine = LocalEngine()
    log(f"starting engine on {engine.url} (flags: {' '.join(engine.command()[3:])})")
    with engine:
        captures["version-prefix.json"] = get(f"{engine.url}/version")
        captures["models-prefix.json"] = get(f"{engine.url}/v1/models")
        captures["metrics-prefix-t0.txt"] = get(f"{engine.url}/metrics")
        log(f"driving {LOAD_S} s of load: {WORKLOAD}")
        done: dict = {}
        load = threading.Thread(target=lambda: done.update(r=drive_sync(engine.url, duration_s=LOAD_S, **WORKLOAD)))
        started = time.monotonic()
        load.start()
        time.sleep(T1_AFTER_S)
        captures["metrics-prefix-t1.txt"] = get(f"{engine.url}/metrics")
        log(f"captured t1 {time.monotonic() - started:.1f} s into the load")
        load.join()
        r = done["r"]
        log(f"load: {r.ok} ok, {r.errors} errors of {r.requests} in {r.elapsed_s:.1f} s")
        if r.errors:
            raise SystemExit(f"the load had errors ({r.first_error}); nothing saved")

    log("restarting the engine on the same port")
    with LocalEngine(port=engine.port) as again:
        captures["metrics-after-restart.txt"] = get(f"{again.url}/metrics")

    t1, after = captures["metrics-prefix-t1.txt"], captures["metrics-after-restart.txt"]
    for name in ("vllm:prompt_tokens_total", "vllm:prefix_cache_hits_total"):
        if not counter(after, name) < counter(t1, name):
            raise SystemExit(f"{name} did not reset across the restart; nothing saved")
    if counter(t1, "vllm:prefix_cache_hits_total") <= 0:
        raise SystemExit("no prefix cache hits under a shared-prefix load; nothing saved")
    return save(out, captures)


if __name__ == "__main__":
    sys.exit(main())
