"""How honest and how strong the experiment verdicts are, by simulation: fixed horizon beside
sequential stopping. A benchmark, not a test.

    .venv/bin/python benchmarks/stats_calibration.py            # a table
    .venv/bin/python benchmarks/stats_calibration.py --json     # {"fixed": {...}, "sequential": {...}}

Each simulated experiment is judged the way advisor/experiments/run/runner.py judges a real one: a
primary readout and three secondaries, each block's per-request latencies log-normal (--sigma) with
a random block effect (--drift, the machine drifting between blocks) and heavy tails (a --outliers
share of requests 8x slower); the candidate's latencies are the baseline's times the true ratio. The
design (blocks per arm, requests per block, looks) comes from advisor.experiments.design.planning.plan for
--plan-effect, from the noise a simulated A/A calibration measures (12 blocks per arm, as
advisor/experiments/design/calibration.py measures a real target). The
sequential design looks after every pair of blocks at its boundary level and stops at the first
decisive primary; the fixed one looks once, at the maximum. Secondaries are judged behind the
primary at the stopping look's level (judgement.family: gatekeeping, Holm among them).

Figures per design:
  aa_false_verdict_rate  A/A runs whose primary says improved or regressed
  familywise_error       A/A runs where the primary or any secondary says improved or regressed
  ci_coverage            runs (A/A and with effects) whose primary interval holds the true ratio
  power_10pct/power_20pct  runs with a 10 % / 20 % slower candidate whose primary says regressed
  mean_blocks_*          blocks per arm used, on average (A/A, 10 %, 20 %)
Targets (issue 11): false verdicts and family-wise error <= 5 % within simulation error, coverage
>= 93 %, power >= 80 % at 20 % within the planned maximum.

    .venv/bin/python benchmarks/stats_calibration.py --validity   # the out-of-reach rule (issue 28)

--validity runs the sequential design with invalid blocks (the load generator fell behind: the
block is not judged), per scenario, without and with the rule that stops a run whose verdict is out
of reach (advisor/experiments/judgement/reach.py), and prints the same figures beside the blocks and requests
each run used. Scenarios: every block valid; the baseline valid with probability 0.2 (a busy
baseline); the first three baseline blocks invalid, then valid with probability 0.95 (recovering
late); both arms valid with probability 0.8.
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

from advisor.experiments.judgement import judge as judgement
from advisor.experiments.design import planning# noqa: E402


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
        r = judgement.compare("primary", a[:k], b[:k], statistic=primary_stat, alpha=lv, seed=seed + k,
                          n_boot=args.n_boot)
        if r.verdict != "inconclusive":
            break
    results = [judgement.compare(f"m{i}", a[:used], b[:used], statistic=primary_stat if i == 0 else "p50",
                             alpha=level, seed=seed + i, n_boot=args.n_boot) for i, (a, b) in enumerate(readouts)]
    judged = judgement.family(results[0], results[1:], alpha=level)
    p = judged[0]
    return {"primary": p.verdict, "any_false": any(j.verdict in ("improved", "regressed") for j in judged),
            "covered": p.ci is not None and p.ci[0] <= ratio <= p.ci[1], "blocks": used}


SCENARIOS = {
    "all valid": (lambda k: 1.0, lambda k: 1.0),
    "busy baseline (20 % valid)": (lambda k: 0.2, lambda k: 1.0),
    "recovering late": (lambda k: 0.0 if k < 3 else 0.95, lambda k: 1.0),
    "both 80 % valid": (lambda k: 0.8, lambda k: 0.8),
}


def one_run_valid(rng, plan: planning.Plan, ratio: float, args, seed: int, scenario: str, rule: bool) -> dict:
    """one_run with invalid blocks left out of the judgement, as runner.py does, and the run
    stopped for an out-of-reach verdict when `rule`."""
    from advisor.experiments.judgement import reach
    from advisor.experiments.result import BlockRecord

    k_max, n, stop = plan.max_blocks, plan.requests_per_block, plan.stopping
    a, b = arm(rng, k_max, n, args), arm(rng, k_max, n, args, ratio)
    p_base, p_cand = SCENARIOS[scenario]
    valid = [(rng.random() < p_base(k), rng.random() < p_cand(k)) for k in range(k_max)]
    records: list = []
    verdict, ci, used = "inconclusive", None, k_max
    for k in range(1, k_max + 1):
        vb, vc = valid[k - 1]
        records += [BlockRecord(arm="baseline", block=k - 1, requests=n, ok=n, errors=0, ttft_p50=None,
                                tpot_p50=None, e2e_p95=None, generator_valid=vb),
                    BlockRecord(arm="candidate", block=k - 1, requests=n, ok=n, errors=0, ttft_p50=None,
                                tpot_p50=None, e2e_p95=None, generator_valid=vc)]
        lv = stop.level_at(k, k_max)
        short = reach.shortfall(records)
        if lv is not None and not short:
            ja = [a[i] for i in range(k) if valid[i][0]]
            jb = [b[i] for i in range(k) if valid[i][1]]
            r = judgement.compare("primary", ja, jb, statistic=plan.statistic, alpha=lv, seed=seed + k, n_boot=args.n_boot)
            verdict, ci, used = r.verdict, r.ci, k
            if r.verdict != "inconclusive":
                break
        elif lv is not None:
            verdict, ci, used = "inconclusive", None, k
        if rule and k < k_max and short and reach.out_of_reach(records, k_max):
            verdict, ci, used = "inconclusive", None, k
            break
    return {"primary": verdict, "covered": ci is not None and ci[0] <= ratio <= ci[1], "judged": ci is not None,
            "blocks": used, "requests": 2 * used * n}


def evaluate_validity(plan: planning.Plan, args) -> dict:
    out = {}
    for scenario in SCENARIOS:
        for rule in (False, True):
            rng = np.random.default_rng(args.seed)  # the same simulated runs with and without the rule
            aa = [one_run_valid(rng, plan, 1.0, args, 1000 * i, scenario, rule) for i in range(args.runs)]
            e20 = [one_run_valid(rng, plan, 1.20, args, 1000 * i + 2, scenario, rule) for i in range(args.runs)]
            judged = [r for r in aa + e20 if r["judged"]]
            out[f"{scenario} | {'with' if rule else 'without'} the rule"] = {
                "aa_false_verdict_rate": sum(r["primary"] in ("improved", "regressed") for r in aa) / args.runs,
                "ci_coverage_when_judged": (sum(r["covered"] for r in judged) / len(judged)) if judged else None,
                "power_20pct": sum(r["primary"] == "regressed" for r in e20) / args.runs,
                "mean_blocks": float(np.mean([r["blocks"] for r in aa + e20])),
                "mean_requests": float(np.mean([r["requests"] for r in aa + e20])),
            }
    return out


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
    """What an A/A calibration of the simulated target measures (advisor/experiments/design/calibration.py):
    12 blocks per arm, the log of each block's statistic, its spread between blocks around each
    arm's mean, and its within-block bootstrap SD."""
    from advisor.experiments.design.calibration import _sampling_var, _statistic

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
    ap.add_argument("--validity", action="store_true", help="the out-of-reach rule's table (invalid blocks)")
    args = ap.parse_args()
    noise = noise_of(args, np.random.default_rng(args.seed + 1))
    if args.validity:
        plan = planning.plan(args.statistic, noise, requests_per_block=args.requests, effect=args.plan_effect,
                             sequential=True)
        started = time.monotonic()
        table = evaluate_validity(plan, args)
        if args.json:
            print(json.dumps(table, indent=2))
            return 0
        print(f"{args.runs} simulated A/A and {args.runs} 20 %-effect runs per row; sequential, at most "
              f"{plan.max_blocks} blocks per arm of {plan.requests_per_block} requests; primary {args.statistic}; "
              f"{time.monotonic() - started:.0f} s")
        cols = ["aa_false_verdict_rate", "ci_coverage_when_judged", "power_20pct", "mean_blocks", "mean_requests"]
        print(f"{'':52}" + "".join(f"{c[:14]:>15}" for c in cols))
        for row, figs in table.items():
            print(f"{row:52}" + "".join("-".rjust(15) if figs[c] is None else f"{figs[c]:>15.3f}" for c in cols))
        return 0
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
