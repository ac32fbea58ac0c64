"""Experiments on a deployment that serves users (issue 28), on the real llama-server: an engine
found serving its own clients gets a fresh baseline replica where the host has room for one, and is
refused before any arm starts, with the choices, where it has not; a load generator starved on
purpose is refused before its first block, or stopped within two looks, with the cause named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx
import yaml

from advisor.experiments.arms import room
from advisor.localstack import LlamaServer, paths
from advisor.localstack.deployment import write_deployment
from tests.support.servers import ROOT, listener


def busy(url: str) -> bool:
    """llama-server reports the requests its slots are processing."""
    text = httpx.get(f"{url}/metrics", timeout=5).text
    return any(line.startswith("llamacpp:requests_processing") and float(line.split()[-1]) > 0
               for line in text.splitlines())


def advisor(tmp_path, *args: str, prefix: tuple[str, ...] = (), timeout: float = 400) -> subprocess.CompletedProcess:
    env = {**os.environ, "ADVISOR_DATA_DIR": str(tmp_path / "data"), "COLUMNS": "200"}
    return subprocess.run([*prefix, sys.executable, "-m", "advisor.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_an_engine_serving_its_own_users_gets_a_fresh_baseline_or_a_refusal_before_anything_starts(
        tmp_path, background):
    with LlamaServer(model=paths.tiny_gguf("Q8_0"), max_num_seqs=1, threads=1) as engine:
        found = listener(engine.port)
        dep = write_deployment(engine, tmp_path / "dep.yaml", name="local-cpu-llama")
        cport = yaml.safe_load(dep.read_text())["local"]["candidate_port"]
        background.start(engine.url, requests=10_000, duration_s=25, concurrency=2, prompt_words=40, max_tokens=24)
        deadline = time.monotonic() + 30
        while not busy(engine.url) and time.monotonic() < deadline:
            time.sleep(0.2)
        r = advisor(tmp_path, "experiment", "--deployment", str(dep), "--mechanism", "max_num_seqs", "--value", "2",
                    "--blocks", "3", "--block-requests", "8", "--concurrency", "2", "--readout", "ttft_p50",
                    "--no-save", "--output", "json")
        # The found engine, a fresh baseline replica and the candidate, one thread each.
        if room.Host.this().cores >= 3:
            assert r.returncode in (0, 1), r.stderr
            x = json.loads(r.stdout)
            assert x["status"] == "finished" and (x["verdict"] != "inconclusive" or x["reason"]), x
            assert any("the baseline arm is a fresh replica" in n and "outside traffic" in n
                       for n in x["server_notes"]), x["server_notes"]
        else:
            assert r.returncode == 2, r.stdout + r.stderr
            err = " ".join(r.stderr.split())
            assert "carries outside traffic" in err and "does not fit this host" in err, err
            assert "--baseline found" in err, err
            assert listener(cport) is None, "no arm was started"
        assert listener(engine.port) == found, "the engine found serving is untouched"
        background.join()


# A real-time busy loop on one core, 150 ms of every 250: a process of normal priority on that core
# waits for it (the kernel's scheduler lets a FIFO task run until it sleeps), as a load generator
# waits on a host whose CPUs are taken.
HOG = ("import time\n"
       "while True:\n"
       "    t = time.monotonic()\n"
       "    while time.monotonic() - t < 0.15: pass\n"
       "    time.sleep(0.1)\n")


def test_a_starved_load_generator_is_stopped_before_its_first_block_or_within_two_looks(tmp_path):
    """The advisor on core 0, its engines on core 1 (the spec's command pinned there); once the
    experiment has begun, a real-time hog takes core 0 most of the time. An open-loop workload, so
    that a send can fall behind its schedule. The trial before the first block may catch it (if the
    hog is up by then); otherwise the blocks' lag does, and the out-of-reach rule stops the run."""
    workload = tmp_path / "w.yaml"
    workload.write_text(yaml.safe_dump({"name": "open", "arrival": {"kind": "poisson", "rate": 6}, "requests": 24,
                                        "buckets": [{"prompt_tokens": 24, "output_tokens": 8}], "seed": 3}))
    data = tmp_path / "data"
    hog = None
    with LlamaServer(model=paths.tiny_gguf("Q8_0"), max_num_seqs=1, threads=1) as engine:
        subprocess.run(["taskset", "-a", "-p", "-c", "1", str(engine.proc.pid)], check=True, capture_output=True)
        path = write_deployment(engine, tmp_path / "d.yaml", name="local-cpu-llama")
        spec = yaml.safe_load(path.read_text())
        spec["local"]["command"] = ["taskset", "-c", "1", *spec["local"]["command"]]
        path.write_text(yaml.safe_dump(spec))
        env = {**os.environ, "ADVISOR_DATA_DIR": str(data), "COLUMNS": "200"}
        proc = subprocess.Popen(["taskset", "-c", "0", sys.executable, "-m", "advisor.cli", "experiment",
                                 "--deployment", str(path), "--mechanism", "max_num_seqs", "--value", "2",
                                 "--workload", str(workload), "--blocks", "4", "--readout", "ttft_p50",
                                 "--no-save", "--output", "json"],
                                cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 120
            while proc.poll() is None and time.monotonic() < deadline:
                journals = list((data / "experiments").glob("*/journal.jsonl")) if (data / "experiments").exists() else []
                if journals and '"begin"' in journals[0].read_text():
                    break
                time.sleep(0.1)
            hog = subprocess.Popen(["chrt", "-f", "1", "taskset", "-c", "0", sys.executable, "-c", HOG])
            out, err = proc.communicate(timeout=480)
        finally:
            if hog is not None:
                hog.kill()
                hog.wait()
            if proc.poll() is None:
                proc.terminate()
                proc.wait(60)
        text = " ".join((out + err).split())
        print(f"\nexit {proc.returncode}: {text[-1500:]}")
        if proc.returncode == 2:  # refused before any arm started
            assert "the load generator cannot keep this schedule on this host now" in text, text
        else:
            x = json.loads(out)
            looks = x["looks"]
            assert x["verdict"] == "inconclusive" and len(looks) <= 2, (looks, x["stop_reason"])
            assert "cannot be judged" in x["stop_reason"] and "fell behind its schedule" in x["stop_reason"], x
            assert "waited for a CPU" in x["stop_reason"] and "starved it" in x["stop_reason"], x["stop_reason"]
            assert x["baseline_restored"]
        assert listener(spec["local"]["candidate_port"]) is None
