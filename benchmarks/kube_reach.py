"""What reaching an arm through the API server's pods proxy costs, beside reaching its pod IP.

    .venv/bin/python benchmarks/kube_reach.py [--requests 60] [--tokens 32]

One llama-server pod (the tiny GGUF, one slot) runs in the Kubernetes stand-in
(tests/support/kube_standin.py); the same streamed completions are sent one at a time, alternating,
to its pod IP and through the advisor's relay (advisor/experiments/arms/kube_reach.py) and the
stand-in's pods proxy. Printed: time to the first token, the gap between tokens and the whole
answer, p50 and p95 per path, and their ratio. What this does not measure: a real API server (Go,
TLS, its priority and fairness queues, the network to it and from it to the node); the stand-in's
proxy is Python's http.server on the same host, so the overhead printed is this host's relay and
stand-in, an indication and not a cluster's figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor.experiments.arms.kube_api import Kube  # noqa: E402
from advisor.experiments.arms.kube_reach import PodRelay  # noqa: E402
from advisor.localstack import paths  # noqa: E402
from tests.support.kube_standin import KubeStandIn, node  # noqa: E402

NS = "llm"


def pod(image: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "engine", "namespace": NS},
            "spec": {"containers": [{"name": "engine", "image": f"{image}:1",
                                     "args": ["-m", str(paths.tiny_gguf("Q8_0")), "--alias", "tiny", "--port", "8000",
                                              "-np", "1", "-t", "1", "--metrics"],
                                     "ports": [{"containerPort": 8000}],
                                     "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}}}]}}


def one(client: httpx.Client, url: str, tokens: int) -> tuple[float, float, float]:
    body = {"model": "tiny", "prompt": "The quick brown fox", "max_tokens": tokens, "stream": True,
            "ignore_eos": True, "temperature": 0}
    t0 = time.perf_counter()
    stamps = []
    # A connection per request on both paths: llama-server closes a kept-alive one after a few requests.
    with client.stream("POST", url + "/v1/completions", json=body, headers={"Connection": "close"}) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]" and json.loads(line[6:])["choices"][0]["text"]:
                stamps.append(time.perf_counter())
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    return stamps[0] - t0, statistics.median(gaps) if gaps else 0.0, time.perf_counter() - t0


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=60, help="per path")
    ap.add_argument("--tokens", type=int, default=32)
    a = ap.parse_args()
    image = "llm/llama-server"
    with tempfile.TemporaryDirectory() as tmp, KubeStandIn(nodes=[node("cpu-1")], namespaces=(NS,),
                                                           images={image: [str(paths.llama_cpp_bin())]}) as k:
        k.add(pod(image))
        deadline = time.monotonic() + 120
        while not any(c.get("type") == "Ready" and c.get("status") == "True"
                      for c in (k.get("pods", "engine", NS) or {}).get("status", {}).get("conditions", [])):
            assert time.monotonic() < deadline, "the pod did not become ready"
            time.sleep(0.2)
        ip = k.get("pods", "engine", NS)["status"]["podIP"]
        kube = Kube(NS, str(k.write_kubeconfig(Path(tmp) / "kubeconfig", namespace=NS)))
        relay = PodRelay(kube, "engine", 8000)
        urls = {"pod IP": f"http://{ip}:8000", "pods proxy": relay.url}
        got: dict[str, list[tuple[float, float, float]]] = {p: [] for p in urls}
        with httpx.Client(timeout=60) as client:
            for p, u in urls.items():  # warm both paths
                one(client, u, a.tokens)
            for i in range(a.requests):
                for p in (list(urls) if i % 2 == 0 else list(urls)[::-1]):
                    got[p].append(one(client, urls[p], a.tokens))
        relay.close()
        kube.close()
    print(f"{a.requests} streamed completions of {a.tokens} tokens per path, one at a time, alternating "
          f"(llama-server, tiny GGUF, one slot and thread, in the Kubernetes stand-in)")
    print(f"{'':24}{'pod IP':>12}{'pods proxy':>12}{'ratio':>8}")
    for i, name in enumerate(("time to first token", "gap between tokens", "whole answer")):
        for q in (0.5, 0.95):
            d, x = (pct([r[i] for r in got[p]], q) * 1000 for p in urls)
            print(f"{name + f' p{int(q * 100)}':24}{d:10.1f}ms{x:10.1f}ms{x / d:8.2f}")


if __name__ == "__main__":
    main()
