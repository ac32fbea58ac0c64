"""Capture real /metrics (and /props, /v1/models) from a live llama.cpp llama-server serving the tiny
model's Q8_0 GGUF into tests/fixtures/llamacpp-vendored-0.3.36-cpu/ (the llama.cpp inside
llama-cpp-python 0.3.36's source package, which has no build number), the captures the dialect is
verified against (probes/dialects/llamacpp.yaml `verified_live`).

    .venv/bin/python scripts/capture_llamacpp_fixtures.py [--out DIR]

Re-runnable; overwrites what it writes: metrics-idle-cold.txt, metrics-load-t0.txt (a few seconds
into a queue of more requests than slots), metrics-load-t1.txt (later in it), metrics-idle-after-
load.txt, props.json, models.json, version.txt. Local paths are scrubbed from what is saved.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import _capture  # scripts/_capture.py: scripts/ is on sys.path when run
from _capture import log, save

from advisor.localstack import LlamaServer, drive_sync, paths

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = dict(requests=100_000, concurrency=8, prompt_words=300, max_tokens=48, seed=0)
LOAD_S = 16


def scrub(text: str) -> str:
    text = text.replace(str(paths.tiny_gguf("Q8_0").parent), "models")
    return text.replace(str(Path.home()), "~")


def get(url: str) -> str:
    return _capture.get(url, scrub)


def build() -> str:
    """What llama-server --version says of itself (a source package's build has no git number)."""
    out = subprocess.run([str(paths.llama_cpp_bin("llama-server")), "--version"], capture_output=True, text=True,
                         timeout=30)
    text = (out.stdout + out.stderr).strip()
    if "version:" not in text:
        raise SystemExit(f"llama-server --version said nothing known: {text[:200]!r}")
    return text


def value(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? (\S+)$", text, re.M)
    if not m:
        raise SystemExit(f"capture has no {name}")
    return float(m.group(1))


def main() -> int:
    version = build()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path,
                    default=ROOT / "tests" / "fixtures" / f"llamacpp-vendored-{paths.LLAMA_CPP_PYTHON_VERSION}-cpu")
    out = ap.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    captures: dict[str, str] = {"version.txt": f"llama.cpp vendored in llama-cpp-python=="
                                               f"{paths.LLAMA_CPP_PYTHON_VERSION}, built for this CPU; "
                                               f"llama-server --version:\n{version}\n"}
    engine = LlamaServer(max_num_seqs=2)
    log(f"starting {' '.join(engine.command())}")
    with engine:
        captures["props.json"] = get(f"{engine.url}/props")
        captures["models.json"] = get(f"{engine.url}/v1/models")
        captures["metrics-idle-cold.txt"] = get(f"{engine.url}/metrics")
        log(f"driving {LOAD_S} s of load: {WORKLOAD}")
        done: dict = {}
        load = threading.Thread(target=lambda: done.update(r=drive_sync(engine.url, duration_s=LOAD_S, **WORKLOAD)))
        load.start()
        time.sleep(4)
        captures["metrics-load-t0.txt"] = get(f"{engine.url}/metrics")
        time.sleep(8)
        captures["metrics-load-t1.txt"] = get(f"{engine.url}/metrics")
        load.join()
        r = done["r"]
        log(f"load: {r.ok} ok, {r.errors} errors of {r.requests} in {r.elapsed_s:.1f} s")
        if r.errors:
            raise SystemExit(f"the load had errors ({r.first_error}); nothing saved")
        time.sleep(1)
        captures["metrics-idle-after-load.txt"] = get(f"{engine.url}/metrics")
    t0, t1 = captures["metrics-load-t0.txt"], captures["metrics-load-t1.txt"]
    if not value(t1, "llamacpp:tokens_predicted_total") > value(t0, "llamacpp:tokens_predicted_total") > 0:
        raise SystemExit("tokens_predicted_total did not grow under load; nothing saved")
    if value(t1, "llamacpp:requests_processing") < 1:
        raise SystemExit("no slot busy in the middle of the load; nothing saved")
    return save(out, captures)


if __name__ == "__main__":
    sys.exit(main())
