"""Diagnose latency at scale: `advisor diagnose` beside vllm-doctor, against one real Prometheus
holding N vLLM replicas (and their DCGM GPUs) with days of history. A benchmark, not a test.

    .venv/bin/python benchmarks/diagnose_at_scale.py            # 64 and 8 replicas, 7 days
    .venv/bin/python benchmarks/diagnose_at_scale.py --days 1 --replicas 16 --repeats 3

What it does, in one run: backfills each Prometheus with promtool (coarse samples for the old
days, 15 s ones for the last hour; the traffic is tests/scenarios/ttft-high-tpot-normal.yaml with
one replica at 5x), starts it, puts a counting HTTP proxy (127.0.0.1 only) in front of it, then
runs both tools as the user would, interleaved, and prints median wall time, the number of HTTP
requests each made (the proxy's count; ours also reports its own), and the ratios.

Both tools evaluate at "now" (vllm-doctor has no way to ask for another time), so the generated
history runs past the moment of generation by --lead; the run refuses to measure once "now" has
left the fine-grained hour. vllm-doctor is installed from PyPI into its own virtual environment
under the bench work dir ($ADVISOR_HOME or ~/.cache/llm-advisor, then bench/).
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _peers import peer_command  # noqa: E402

from advisor.localstack import LocalPrometheus  # noqa: E402
from advisor.localstack.paths import advisor_home  # noqa: E402
from tests.scenarios import generate as gen  # noqa: E402

TRAFFIC = ROOT / "tests" / "scenarios" / "ttft-high-tpot-normal.yaml"
BLOCK = 7200  # promtool cuts blocks on 2 h boundaries and re-reads its whole input once per block
GPU_SERIES = {"DCGM_FI_PROF_SM_ACTIVE": 0.3, "DCGM_FI_DEV_GPU_UTIL": 60, "DCGM_FI_DEV_FB_USED": 70000,
              "DCGM_FI_DEV_FB_FREE": 10000, "DCGM_FI_DEV_POWER_USAGE": 350, "DCGM_FI_PROF_NVLINK_TX_BYTES": 2e8}


def machine() -> str:
    model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                  if ln.startswith("model name")), "unknown CPU") if Path("/proc/cpuinfo").exists() else "unknown CPU"
    prom = subprocess.run(["prometheus", "--version"], capture_output=True, text=True)
    version = (prom.stdout or prom.stderr).splitlines()[0] if (prom.stdout or prom.stderr) else "unknown"
    return f"CPU: {model}, {os.cpu_count()} cores; {version}; Python {sys.version.split()[0]}"


def scenario(replicas: int, days: float, old_interval: str, end: int) -> gen.Scenario:
    raw = gen.read(TRAFFIC)
    raw["replicas"] = [{"instance": f"10.0.{i // 250}.{i % 250 + 1}:8000", "pod": f"vllm-{i}",
                        **({"traffic": 5} if i == 0 else {})} for i in range(replicas)]
    raw["gpus"] = [{"count": min(4, replicas - h * 4), "Hostname": f"node-{h}"} for h in range(math.ceil(replicas / 4))]
    raw["series"] += [{"gpu": name, "values": v} for name, v in GPU_SERIES.items()]
    raw["interval"] = "15s"
    raw["history"] = [{"interval": old_interval, "duration": f"{days * 86400 - 3600:.0f}s"},
                      {"interval": "15s", "duration": "1h"}]
    return gen.parse(raw, TRAFFIC, end=end)


def backfill(scn: gen.Scenario, data: Path, tmp: Path) -> tuple[int, float, float]:
    """One OpenMetrics file per 2 h block, so promtool reads each sample once; the next file is
    written while promtool imports the previous one. Returns samples, seconds writing, seconds total."""
    started = time.perf_counter()
    families = gen.build(scn)
    samples, writing, running = 0, 0.0, None
    for i, lo in enumerate(range(scn.start // BLOCK * BLOCK, scn.end + 1, BLOCK)):
        t0 = time.perf_counter()
        path = tmp / f"block-{i % 2}.om"  # two files in turn: one being written, one being imported
        with open(path, "w") as f:
            samples += gen.write(families, scn.timestamps, f, lo, lo + BLOCK)
        writing += time.perf_counter() - t0
        if running is not None:
            _finish(running)
        proc = subprocess.Popen(["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q", str(path), str(data)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        running = (proc, path)
    if running is not None:
        _finish(running)
    return samples, writing, time.perf_counter() - started


def _finish(running: tuple[subprocess.Popen, Path]) -> None:
    proc, path = running
    out, err = proc.communicate()
    if proc.returncode != 0:
        sys.exit(f"promtool failed on {path}: {(err or out).strip()[:500]}")


class CountingProxy:
    """Forwards every request to Prometheus and counts them by path. Threaded, 127.0.0.1 only."""

    def __init__(self, upstream: str):
        u = urlsplit(upstream)
        self.counts: Counter[str] = Counter()
        self.span: list[float] = []  # first request in, last response out: the tool's data phase
        lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _relay(self) -> None:
                with lock:
                    proxy.counts[urlsplit(self.path).path] += 1
                    proxy.span = proxy.span or [time.perf_counter()]
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, body=body or None, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()
                with lock:
                    proxy.span[1:] = [time.perf_counter()]

            do_GET = do_POST = _relay

            def log_message(self, *args) -> None:
                pass

        class Server(ThreadingHTTPServer):
            # The default backlog of 5 drops the SYNs of a tool that opens 14 connections at once;
            # the kernel retries them 1 s later, which the proxy would add to that tool's time.
            request_queue_size = 128
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def take(self) -> tuple[Counter[str], float]:
        counts, span, self.counts, self.span = self.counts, self.span, Counter(), []
        return counts, (span[-1] - span[0]) if len(span) == 2 else 0.0

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def run_once(cmd: list[str], proxy: CountingProxy, cwd: Path) -> dict:
    proxy.take()
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=120)
    wall = time.perf_counter() - t0
    counts, span = proxy.take()
    try:
        body = json.loads(done.stdout)
    except ValueError:
        body = {}
    return {"wall": wall, "span": span, "rc": done.returncode, "requests": sum(counts.values()), "paths": counts,
            "body": body, "stderr": done.stderr.strip()[-300:]}


def summary(tool: str, body: dict) -> str:
    if tool == "advisor":
        return ", ".join(f["rule_id"] for f in body.get("findings", [])) or "healthy"
    firing = [c.get("id") for c in body.get("checks", []) if c.get("finding")]
    return f"health={body.get('health')}; " + (", ".join(firing) or "nothing firing")


def measure(url: str, tools: dict, repeats: int, cwd: Path) -> dict[str, list[dict]]:
    proxy = CountingProxy(url)
    try:
        for cmd in tools.values():  # warm-up: page cache and Prometheus caches, not counted
            run_once(cmd(proxy.url), proxy, cwd)
        runs: dict[str, list[dict]] = {n: [] for n in tools}
        for _ in range(repeats):  # interleaved, so drift on a shared machine hits both alike
            for name, cmd in tools.items():
                runs[name].append(run_once(cmd(proxy.url), proxy, cwd))
        return runs
    finally:
        proxy.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicas", type=int, nargs="+", default=[64, 8])
    ap.add_argument("--days", type=float, default=7)
    ap.add_argument("--old-interval", default="5m", help="sample spacing before the last hour")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--window", default="5m")
    ap.add_argument("--lead", default="30m", help="how far past generation the history runs")
    ap.add_argument("--doctor-version", default="0.6.0")
    ap.add_argument("--work", type=Path, default=advisor_home() / "bench")
    args = ap.parse_args()

    args.work.mkdir(parents=True, exist_ok=True)
    print(f"date: {time.strftime('%Y-%m-%d %H:%M %Z')}\n{machine()}", flush=True)
    doctor = peer_command(args.work, "vllm-doctor", args.doctor_version, "vllm-doctor")
    ver = subprocess.run([str(doctor), "--version"], capture_output=True, text=True).stdout.strip()
    rev = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True, cwd=ROOT)
    print(f"{ver or 'vllm-doctor ' + args.doctor_version}; advisor at {rev.stdout.strip() or 'unknown revision'}\n",
          flush=True)
    advisor = str(ROOT / ".venv" / "bin" / "advisor")
    tools = {"advisor": lambda url: [advisor, "diagnose", "--prom-url", url, "--window", args.window, "--output", "json"],
             "vllm-doctor": lambda url: [str(doctor), "diagnose", url, "--since", args.window, "--output", "json"]}

    # What a run costs before it asks Prometheus anything: interpreter, imports, CLI parsing.
    for name, exe in (("advisor", advisor), ("vllm-doctor", str(doctor))):
        walls = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            subprocess.run([exe, "diagnose", "--help"], capture_output=True, cwd=args.work)
            walls.append(time.perf_counter() - t0)
        print(f"startup ({name} diagnose --help): median {statistics.median(walls):.2f} s")

    results = {}
    for n in args.replicas:
        end = int((time.time() + gen.seconds(args.lead)) // 15 * 15)
        scn = scenario(n, args.days, args.old_interval, end)
        with tempfile.TemporaryDirectory(prefix="advisor-bench-", dir=args.work) as tmp:
            data = Path(tmp) / "data"
            samples, writing, total = backfill(scn, data, Path(tmp))
            size = sum(f.stat().st_size for f in data.rglob("*") if f.is_file()) / 2**20
            blocks = sum(1 for d in data.iterdir() if (d / "meta.json").exists())
            print(f"\n[{n} replicas] backfill: {samples / 1e6:.1f} M samples over {args.days:g} days "
                  f"({len(scn.timestamps)} points per series), {total:.0f} s "
                  f"(writing OpenMetrics {writing:.0f} s, promtool alongside); TSDB {size:.0f} MiB in {blocks} blocks",
                  flush=True)
            prom = LocalPrometheus([], data_dir=data).start(timeout=300)
            try:
                print(f"[{n} replicas] Prometheus ready after {prom.ready_after_s:.1f} s", flush=True)
                if not scn.end - 3600 + gen.seconds(args.window) <= time.time() <= scn.end:
                    sys.exit("'now' has left the last hour of fine samples: raise --lead")
                results[n] = measure(prom.url, tools, args.repeats, args.work)
            finally:
                prom.stop()
        report(n, results[n])
    verdict(results)


def report(n: int, runs: dict[str, list[dict]]) -> None:
    print(f"\n[{n} replicas] {'tool':<12} {'median':>8} {'min':>7} {'max':>7} {'queries':>8} {'requests':>9} "
          f"{'reported':>9}  result")
    for tool, rs in runs.items():
        walls = [r["wall"] for r in rs]
        reqs = sorted({r["requests"] for r in rs})
        reported = sorted({r["body"].get("queries") for r in rs if "queries" in r["body"]}) or ["-"]
        bad = [r for r in rs if not _ok(tool, r)]
        span = statistics.median(r["span"] for r in rs)
        print(f"[{n} replicas] {tool:<12} {statistics.median(walls):7.2f}s {min(walls):6.2f}s {max(walls):6.2f}s "
              f"{span:7.2f}s {'/'.join(map(str, reqs)):>9} {'/'.join(map(str, reported)):>9}  {summary(tool, rs[-1]['body'])}"
              + (f"\n  FAILED {len(bad)} of {len(rs)} runs; rc {bad[0]['rc']}: {bad[0]['stderr']}" if bad else ""))
        print(f"[{n} replicas] {'':<12} runs (wall/queries): "
              + " ".join(f"{r['wall']:.2f}/{r['span']:.2f}" for r in rs))
        print(f"[{n} replicas] {'':<12} requests by path: {dict(rs[-1]['paths'])}")
    ours, theirs = (statistics.median(r["wall"] for r in runs[t]) for t in ("advisor", "vllm-doctor"))
    qo, qt = (statistics.median(r["span"] for r in runs[t]) for t in ("advisor", "vllm-doctor"))
    q = runs["advisor"][-1]["requests"] / max(1, runs["vllm-doctor"][-1]["requests"])
    print(f"[{n} replicas] ratio ours/theirs: wall {ours / theirs:.2f}, queries phase {qo / max(qt, 1e-9):.1f}, "
          f"requests {q:.1f}")
    print(f"[{n} replicas] (wall: the whole command; queries: first request to last response, at the proxy)")


def _ok(tool: str, run: dict) -> bool:
    # a run counts only if it printed its JSON report (exit 1 also means "symptoms found")
    return ("queries" if tool == "advisor" else "health") in run["body"]


def verdict(results: dict[int, dict[str, list[dict]]]) -> None:
    print("\ngoal: at most 2 s, never slower than vllm-doctor, query count independent of replicas")
    failed = [(n, t) for n, runs in results.items() for t, rs in runs.items() if not all(_ok(t, r) for r in rs)]
    if failed:
        print(f"  cannot judge: runs failed for {failed}")
        return
    for n, runs in results.items():
        ours = [r["wall"] for r in runs["advisor"]]
        theirs = [r["wall"] for r in runs["vllm-doctor"]]
        print(f"  {n} replicas: every run <= 2 s: {'yes' if max(ours) <= 2 else 'NO'} (max {max(ours):.2f} s); "
              f"median not slower than vllm-doctor: {'yes' if statistics.median(ours) <= statistics.median(theirs) else 'NO'}; "
              f"slowest ours <= fastest theirs: {'yes' if max(ours) <= min(theirs) else 'no'}")
    counts = {n: sorted({r["requests"] for r in runs["advisor"]}) for n, runs in results.items()}
    same = len({tuple(c) for c in counts.values()}) == 1
    print(f"  advisor requests by replica count: {counts} -> {'independent of replicas' if same else 'DEPENDS on replicas'}")


if __name__ == "__main__":
    if not shutil.which("promtool") or not shutil.which("prometheus"):
        sys.exit("promtool and prometheus are needed: run scripts/setup.sh")
    main()
