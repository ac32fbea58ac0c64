"""How honest and how strong the experiment verdicts are, by simulation: fixed horizon beside
sequential stopping. A benchmark, not a test.

    .venv/bin/python benchmarks/stats_calibration.py            # a table
    .venv/bin/python benchmarks/stats_calibration.py --json     # {"fixed": {...}, "sequential": {...}}

Each simulated experiment is judged the way advisor/experiments/runner.py judges a real one: a
primary readout and three secondaries, each block's per-request latencies log-normal (--sigma) with
a random block effect (--drift, the machine drifting between blocks) and heavy tails (a --outliers
share of requests 8x slower); the candidate's latencies are the baseline's times the true ratio. The
design (blocks per arm, requests per block, looks) comes from advisor.experiments.planning.plan for
--plan-effect, from the noise a simulated A/A calibration measures (12 blocks per arm, as
advisor/experiments/calibration.py measures a real target). The
sequential design looks after every pair of blocks at its boundary level and stops at the first
decisive primary; the fixed one looks once, at the maximum. Secondaries are judged behind the
primary at the stopping look's level (stats.judge: gatekeeping, Holm among them).

Figures per design:
  aa_false_verdict_rate  A/A runs whose primary says improved or regressed
  familywise_error       A/A runs where the primary or any secondary says improved or regressed
  ci_coverage            runs (A/A and with effects) whose primary interval holds the true ratio
  power_10pct/power_20pct  runs with a 10 % / 20 % slower candidate whose primary says regressed
  mean_blocks_*          blocks per arm used, on average (A/A, 10 %, 20 %)
Targets (issue 11): false verdicts and family-wise error <= 5 % within simulation error, coverage
>= 93 %, power >= 80 % at 20 % within the planned maximum.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor.experiments import planning, stats  # noqa: E402


def arm(rng, k: int, n: int, args, ratio: float = 1.0) -> list[list[float]]:
    out = []
    for _ in range(k):
        x = np.exp(rng.normal(0, args.drift) + rng.normal(0, args.sigma, n))
        x[rng.random(n) < args.outliers] *= 8.0
        out.append((ratio * x).tolist())
    return out


def one_run(rng, plan: planning.Plan, ratio: float, args, seed: int) -> dict:
    k_max, n, stop = plan.max_blocks, plan.requests_per_block, plan.stopping
    readouts = [(arm(rng, k_max, n, args), arm(rng, k_max, n, args, ratio)) for _ in range(4)]
    primary_stat = plan.statistic
    used, level = k_max, stop.alpha
    for k in range(1, k_max + 1):
        lv = stop.level_at(k, k_max)
        if lv is None:
            continue
        used, level = k, lv
        a, b = readouts[0]
        r = stats.compare("primary", a[:k], b[:k], statistic=primary_stat, alpha=lv, seed=seed + k,
                          n_boot=args.n_boot)
        if r.verdict != "inconclusive":
            break
    results = [stats.compare(f"m{i}", a[:used], b[:used], statistic=primary_stat if i == 0 else "p50",
                             alpha=level, seed=seed + i, n_boot=args.n_boot) for i, (a, b) in enumerate(readouts)]
    judged = stats.judge(results[0], results[1:], alpha=level)
    p = judged[0]
    return {"primary": p.verdict, "any_false": any(j.verdict in ("improved", "regressed") for j in judged),
            "covered": p.ci is not None and p.ci[0] <= ratio <= p.ci[1], "blocks": used}


def evaluate(plan: planning.Plan, args, rng) -> dict:
    runs = args.runs
    aa = [one_run(rng, plan, 1.0, args, 1000 * i) for i in range(runs)]
    e10 = [one_run(rng, plan, 1.10, args, 1000 * i + 1) for i in range(runs)]
    e20 = [one_run(rng, plan, 1.20, args, 1000 * i + 2) for i in range(runs)]
    every = aa + e10 + e20
    return {
        "runs": runs,
        "statistic": plan.statistic,
        "max_blocks_per_arm": plan.max_blocks,
        "requests_per_block": plan.requests_per_block,
        "first_look": plan.stopping.first_look,
        "aa_false_verdict_rate": sum(r["primary"] in ("improved", "regressed") for r in aa) / runs,
        "familywise_error": sum(r["any_false"] for r in aa) / runs,
        "ci_coverage": sum(r["covered"] for r in every) / len(every),
        "power_10pct": sum(r["primary"] == "regressed" for r in e10) / runs,
        "power_20pct": sum(r["primary"] == "regressed" for r in e20) / runs,
        "mean_blocks_aa": float(np.mean([r["blocks"] for r in aa])),
        "mean_blocks_10pct": float(np.mean([r["blocks"] for r in e10])),
        "mean_blocks_20pct": float(np.mean([r["blocks"] for r in e20])),
    }


def noise_of(args, rng) -> planning.Noise:
    """What an A/A calibration of the simulated target measures (advisor/experiments/calibration.py):
    12 blocks per arm, the log of each block's statistic, its spread between blocks around each
    arm's mean, and its within-block bootstrap SD."""
    from advisor.experiments.calibration import _sampling_var, _statistic

    logs, sampling, dof = [], [], 0
    for _ in range(2):
        blocks = [np.asarray(b) for b in arm(rng, 12, args.requests, args)]
        arm_logs = [math.log(_statistic(b, args.statistic)) for b in blocks]
        mean = sum(arm_logs) / len(arm_logs)
        logs += [x - mean for x in arm_logs]
        dof += len(arm_logs) - 1
        sampling += [v for b in blocks if (v := _sampling_var(b, args.statistic, rng)) is not None]
    block_var = sum(d * d for d in logs) / dof
    sampling_var = min(float(np.mean(sampling)), block_var)
    return planning.Noise(drift=math.sqrt(block_var - sampling_var), sampling=math.sqrt(sampling_var),
                          requests=args.requests, source="a simulated A/A calibration (12 blocks per arm)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--statistic", default="p50", choices=["p50", "p95", "p99"])
    ap.add_argument("--runs", type=int, default=300, help="simulated experiments per effect and design")
    ap.add_argument("--requests", type=int, default=48, help="requests per block (raised by the plan for tails)")
    ap.add_argument("--sigma", type=float, default=0.5, help="per-request log-normal sigma")
    ap.add_argument("--drift", type=float, default=0.08, help="random block effect (log SD)")
    ap.add_argument("--outliers", type=float, default=0.03, help="share of requests 8x slower")
    ap.add_argument("--plan-effect", type=float, default=0.20, help="the effect the designs are planned for")
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    noise = noise_of(args, np.random.default_rng(args.seed + 1))
    out = {}
    started = time.monotonic()
    for name, seq in (("fixed", False), ("sequential", True)):
        plan = planning.plan(args.statistic, noise, requests_per_block=args.requests, effect=args.plan_effect,
                             sequential=seq)
        out[name] = evaluate(plan, args, np.random.default_rng(args.seed))
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"noise planned from: block log-SD {noise.sd(args.requests):.3f} at {args.requests} requests "
          f"(drift {noise.drift:.3f}, sampling {noise.sampling:.3f}), {noise.source}")
    print(f"{args.runs} simulated experiments per effect; primary {args.statistic}, 3 p50 secondaries; "
          f"sigma {args.sigma}, drift {args.drift}, {args.outliers:.0%} outliers x8; designs planned for a "
          f"{args.plan_effect:.0%} effect; {time.monotonic() - started:.0f} s")
    keys = ["max_blocks_per_arm", "requests_per_block", "first_look", "aa_false_verdict_rate", "familywise_error",
            "ci_coverage", "power_10pct", "power_20pct", "mean_blocks_aa", "mean_blocks_10pct", "mean_blocks_20pct"]
    print(f"{'':24}{'fixed':>12}{'sequential':>12}")
    for k in keys:
        f, s = out["fixed"][k], out["sequential"][k]
        fmt = (lambda v: f"{v:>12.3f}") if isinstance(f, float) else (lambda v: f"{v:>12}")
        print(f"{k:24}{fmt(f)}{fmt(s)}")
    ratio = out["sequential"]["mean_blocks_20pct"] / out["fixed"]["mean_blocks_20pct"]
    print(f"blocks to a verdict at 20 %: sequential / fixed = {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
