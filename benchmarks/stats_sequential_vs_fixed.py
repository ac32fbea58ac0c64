"""Time to a decisive verdict: a sequential design beside a fixed-horizon one of the same error rates.
A benchmark, not a test.

    .venv/bin/python benchmarks/stats_sequential_vs_fixed.py
    .venv/bin/python benchmarks/stats_sequential_vs_fixed.py --statistic p95 --requests 200 --sims 200

What it does, in one run, by simulation (the same simulated experiments feed both designs):
blocks of per-request latencies, log-normal (sigma --sigma) with a random block effect
(--block-sigma), --requests per block per arm, the candidate faster by each effect size
(candidate = (1 - effect) x baseline). Every design is judged by advisor.experiments.stats at the
same alpha and must reach the same power (share of runs that say "improved"):

* fixed horizon: the fewest blocks per arm whose single `compare` at alpha reaches --power;
* sequential: `sequential` (repeated confidence intervals on an O'Brien-Fleming or Pocock
  boundary, a look after every pair of blocks) with the smallest cap on blocks per arm that
  reaches --power; it stops at the first decisive verdict, so its blocks vary per run.

Both designs' false-verdict rate (A/A: "improved" or "regressed" when nothing changed) is measured
at those horizons and printed. Requests count both arms; wall time assumes the blocks run one after
another (A B A B ...) at --seconds-per-block each, warmup excluded.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor.experiments.stats import compare, min_blocks_per_arm, sequential  # noqa: E402


def simulate(rng, sims: int, blocks: int, requests: int, sigma: float, block_sigma: float,
             ratio: float) -> list[list[tuple[list[float], list[float]]]]:
    """sims experiments, each a list of `blocks` (baseline block, candidate block) pairs."""
    out = []
    for _ in range(sims):
        pairs = []
        for _ in range(blocks):
            a = np.exp(rng.normal(0, block_sigma) + rng.normal(0, sigma, requests))
            b = ratio * np.exp(rng.normal(0, block_sigma) + rng.normal(0, sigma, requests))
            pairs.append((a.tolist(), b.tolist()))
        out.append(pairs)
    return out


def fixed_rates(runs, k: int, args) -> tuple[float, float, float]:
    """Shares of runs saying improved, improved-or-regressed, anything but inconclusive."""
    verdicts = [compare("ttft", [p[0] for p in run[:k]], [p[1] for p in run[:k]],
                        statistic=args.statistic, alpha=args.alpha, margin=args.margin, seed=i,
                        n_boot=args.n_boot).verdict for i, run in enumerate(runs)]
    n = len(runs)
    improved = sum(v == "improved" for v in verdicts) / n
    false_or_true = sum(v in ("improved", "regressed") for v in verdicts) / n
    decisive = sum(v != "inconclusive" for v in verdicts) / n
    return improved, false_or_true, decisive


def sequential_runs(runs, cap: int, args, boundary: str):
    return [sequential("ttft", iter(run[:cap]), statistic=args.statistic, alpha=args.alpha,
                       margin=args.margin, max_blocks=cap, boundary=boundary, seed=i,
                       n_boot=args.n_boot) for i, run in enumerate(runs)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--effects", type=float, nargs="+", default=[0.10, 0.20, 0.30])
    ap.add_argument("--statistic", default="p50", choices=["p50", "p95", "p99", "mean"])
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--margin", type=float, default=0.05)
    ap.add_argument("--power", type=float, default=0.80)
    ap.add_argument("--requests", type=int, default=50, help="requests per block per arm")
    ap.add_argument("--sigma", type=float, default=0.5, help="per-request log-normal sigma")
    ap.add_argument("--block-sigma", type=float, default=0.05, help="random block effect (log sd)")
    ap.add_argument("--seconds-per-block", type=float, default=30.0)
    ap.add_argument("--sims", type=int, default=400)
    ap.add_argument("--max-blocks", type=int, default=40, help="search cap, blocks per arm")
    ap.add_argument("--boundary", nargs="+", default=["obrien-fleming", "pocock"],
                    choices=["obrien-fleming", "pocock"])
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=2024)
    args = ap.parse_args()

    t0 = time.time()
    rng = np.random.default_rng(args.seed)
    kmin = min_blocks_per_arm(args.statistic, args.alpha)
    null_runs = simulate(rng, args.sims, args.max_blocks, args.requests, args.sigma,
                         args.block_sigma, 1.0)
    print(f"statistic {args.statistic}, alpha {args.alpha}, margin {args.margin:.0%}, target power "
          f"{args.power:.0%}; {args.requests} requests per block per arm, log-normal sigma "
          f"{args.sigma}, block effect sigma {args.block_sigma}; {args.seconds_per_block:g} s per "
          f"block; {args.sims} simulated experiments per design point\n")
    head = (f"{'effect':>6} {'design':<26} {'blocks/arm':>10} {'requests':>9} {'wall':>8} "
            f"{'power':>6} {'A/A err':>7} {'decisive':>8} {'ratio':>6}")
    print(head)
    print("-" * len(head))
    for effect in args.effects:
        runs = simulate(rng, args.sims, args.max_blocks, args.requests, args.sigma,
                        args.block_sigma, 1 - effect)
        k_fixed = None
        for k in range(kmin, args.max_blocks + 1):
            power, _, f_decisive = fixed_rates(runs, k, args)
            if power >= args.power:
                k_fixed = k
                break
        if k_fixed is None:
            print(f"{effect:>6.0%} fixed horizon: no k <= {args.max_blocks} reaches the power")
            continue
        _, fixed_err, _ = fixed_rates(null_runs, k_fixed, args)
        f_req = 2 * k_fixed * args.requests
        f_wall = 2 * k_fixed * args.seconds_per_block
        print(f"{effect:>6.0%} {'fixed horizon':<26} {k_fixed:>10} {f_req:>9} {f_wall / 60:>6.1f}m "
              f"{power:>6.1%} {fixed_err:>7.1%} {f_decisive:>8.0%} {'1.00':>6}")
        for boundary in args.boundary:
            found = None
            for cap in range(max(kmin, k_fixed - 2), args.max_blocks + 1):
                res = sequential_runs(runs, cap, args, boundary)
                s_power = sum(r.result.verdict == "improved" for r in res) / len(res)
                if s_power >= args.power:
                    found = (cap, res, s_power)
                    break
            if found is None:
                print(f"{effect:>6.0%} {boundary:<26} no cap <= {args.max_blocks} reaches the power")
                continue
            cap, res, s_power = found
            null = sequential_runs(null_runs, cap, args, boundary)
            s_err = sum(r.result.verdict in ("improved", "regressed") for r in null) / len(null)
            mean_k = float(np.mean([r.blocks_used for r in res]))
            decisive = sum(r.decisive for r in res) / len(res)
            s_req = 2 * mean_k * args.requests
            s_wall = 2 * mean_k * args.seconds_per_block
            label = f"sequential {boundary}"
            print(f"{'':>6} {label:<26} {mean_k:>10.2f} {s_req:>9.0f} {s_wall / 60:>6.1f}m "
                  f"{s_power:>6.1%} {s_err:>7.1%} {decisive:>8.0%} {mean_k / k_fixed:>6.2f}"
                  f"   (cap {cap} blocks/arm)")
    print(f"\nratio = mean blocks (= requests = wall time) of the sequential design / fixed horizon, "
          f"under the effect. blocks/arm for sequential is the mean over runs; A/A err is the share "
          f"of A/A runs that said improved or regressed; decisive is the share of runs under the effect "
          f"with a verdict other than inconclusive. ({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
