"""Capacity at the SLO by simulation: our search beside an emulation of `vllm bench sweep
serve_workload`, over many seeds, on queues whose true capacity is known. A benchmark, not a test.

    .venv/bin/python benchmarks/capacity_simulated.py                 # a table, about a minute
    .venv/bin/python benchmarks/capacity_simulated.py --seeds 400 --json

One live run of benchmarks/capacity.py compares one answer of each tool with a ground truth that is
itself a noisy interval; whether one tool is closer than the other is a question about their
distributions. Here both run against the same simulated deployments (advisor/capacity/simulated.py:
`slots` concurrent requests in front of a FIFO queue, Poisson arrivals, lognormal service times, TTFT
= wait + prefill), each seed a fresh deployment whose speed is drawn so that its capacity falls
anywhere in 3-12 requests/s, the range of the live engine of benchmarks/README.md, since the sweep
rounds its rates to whole requests per second and that grid decides how close it can be.

Ours runs as `advisor capacity` runs: a closed-loop burst of 32 requests, 8 at a time, to start at
half its throughput; trials of --trial tallied requests after capacity/trials.warmup_size's warmup;
the search of capacity/search.py at --width. Its requests include the burst's.
The sweep as vLLM 0.32 runs it (vllm/benchmarks/sweep/serve_workload.py): --num-prompts requests one
at a time and all at once, the ceiling and floor of their throughputs, --iters - 2 rates evenly
between them rounded to whole numbers (duplicates once), each a run of --num-prompts Poisson
arrivals from an idle engine, whose p95 TTFT (numpy's percentile over every request) is compared
with the SLO; its answer is the highest of those rates that held, as benchmarks/capacity.py reads it.

What the queue does not emulate: a real engine's batching (its service time does not depend on how
many requests share a step), HTTP and tokenization costs, and a host's drift between runs.

Figures per shape: each tool's median and p90 relative error, the share of seeds where ours is at
least as close as the sweep's, requests per answer, and our interval's coverage."""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor.capacity import search as s  # noqa: E402
from advisor.capacity.simulated import Queue  # noqa: E402
from advisor.capacity.trials import PROBE_CONCURRENCY, PROBE_REQUESTS, warmup_size  # noqa: E402

# (slots, service-time spread, prefill share): the unit test's three shapes
SHAPES = [(8, 0.3, 0.1), (4, 0.5, 0.1), (1, 0.8, 0.1)]
SLO_IN_SERVICE_TIMES = 1.0  # TTFT p95 <= one mean service time, as in tests/unit/test_capacity_search.py


def closed_loop_throughput(q: Queue, n: int, concurrency: int, rng: random.Random) -> float:
    """Requests completed per second when n requests go `concurrency` at a time (all at once when
    concurrency >= n): each waits for a slot of the engine and for one of the client's."""
    free = [0.0] * min(concurrency, q.slots)
    for _, service in q.draws(n, rng):  # the queue's own service times
        start = min(free)
        free[free.index(start)] = start + service
    return n / max(free)


def p95(ttfts: list[float]) -> float:
    return float(np.percentile(ttfts, 95))


def sweep(q: Queue, threshold: float, prompts: int, iters: int, rng: random.Random) -> tuple[float, int]:
    """(answer, requests) of vLLM's serve_workload sweep on the queue."""
    serial = math.ceil(closed_loop_throughput(q, prompts, 1, rng))
    batch = math.floor(closed_loop_throughput(q, prompts, prompts, rng))
    rates = sorted(set(round(x) for x in np.linspace(serial, batch, iters)[1:-1]))
    held = []
    for rate in rates:
        if rate <= 0:
            continue
        ttft = q.ttfts(rate, q.draws(prompts, rng))
        if p95(ttft) <= threshold:
            held.append(rate)
    return (max(held) if held else 0.0), prompts * (2 + len(rates))


def ours(q: Queue, objective: s.Objective, trial: int, width: float, rng: random.Random,
         max_extensions: int) -> s.Answer:
    start = closed_loop_throughput(q, PROBE_REQUESTS, PROBE_CONCURRENCY, rng) / 2
    warmup = warmup_size(trial)
    limits = s.Limits(start_rate=max(start, s.MIN_RATE), max_rate=s.MAX_RATE, min_rate=s.MIN_RATE, width=width,
                      max_extensions=max_extensions)
    a = s.search(lambda r: q.trial(r, trial, warmup, objective, rng), [objective], limits)
    a.requests += PROBE_REQUESTS
    return a


def run_shape(slots: int, sigma: float, prefill: float, args) -> dict:
    unit = Queue(slots=slots, mean_service_s=1.0, sigma=sigma, prefill_share=prefill)
    objective = s.Objective("ttft_p95", 0.95, SLO_IN_SERVICE_TIMES, "TTFT p95")
    truth_unit = unit.true_capacity(objective)  # at a mean service of 1 s; a queue m times slower: truth / m
    rows = []
    for seed in range(args.seeds):
        rng = random.Random(seed)
        truth = rng.uniform(3.0, 12.0)
        m = truth_unit / truth
        q = Queue(slots=slots, mean_service_s=m, sigma=sigma, prefill_share=prefill)
        obj = s.Objective("ttft_p95", 0.95, SLO_IN_SERVICE_TIMES * m, "TTFT p95")
        a = ours(q, obj, args.trial, args.width, rng, args.max_extensions)
        theirs, their_requests = sweep(q, obj.threshold, args.num_prompts, args.iters, rng)
        est = a.estimate if a.estimate is not None else (a.low or 0.0)
        rows.append({"truth": truth, "ours": est, "low": a.low, "high": a.high, "ours_requests": a.requests,
                     "theirs": theirs, "theirs_requests": their_requests})
    err = lambda x, t: abs(x / t - 1)  # noqa: E731
    ours_err = sorted(err(r["ours"], r["truth"]) for r in rows)
    their_err = sorted(err(r["theirs"], r["truth"]) for r in rows)
    n = len(rows)
    return {
        "shape": f"{slots} slots, sigma {sigma}",
        "ours_median_error": ours_err[n // 2], "ours_p90_error": ours_err[int(n * 0.9)],
        "theirs_median_error": their_err[n // 2], "theirs_p90_error": their_err[int(n * 0.9)],
        "ours_at_least_as_close": sum(err(r["ours"], r["truth"]) <= err(r["theirs"], r["truth"]) for r in rows) / n,
        "ours_requests": statistics.mean(r["ours_requests"] for r in rows),
        "theirs_requests": statistics.mean(r["theirs_requests"] for r in rows),
        "coverage": sum((r["low"] or 0) <= r["truth"] <= (r["high"] or math.inf) for r in rows) / n,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--trial", type=int, default=200, help="our tallied requests per trial")
    ap.add_argument("--width", type=float, default=0.2, help="our search's relative half-width")
    ap.add_argument("--max-extensions", type=int, default=2)
    ap.add_argument("--num-prompts", type=int, default=100, help="requests per point of the sweep")
    ap.add_argument("--iters", type=int, default=6, help="the sweep's --workload-iters")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = [run_shape(*shape, args) for shape in SHAPES]
    if args.json:
        print(json.dumps({"args": vars(args), "shapes": out}, indent=2))
        return
    print(f"ours: trials of {args.trial} (+{warmup_size(args.trial)} warmup), width {args.width}, "
          f"{args.max_extensions} extensions; sweep: {args.num_prompts} prompts, {args.iters} iterations; "
          f"{args.seeds} seeds a shape\n")
    print("| shape | error ours (median / p90) | error sweep (median / p90) | ours at least as close | "
          "requests ours / sweep | our coverage (90 % stated) |")
    print("|---|---|---|---|---|---|")
    for r in out:
        print(f"| {r['shape']} | {r['ours_median_error']:.1%} / {r['ours_p90_error']:.1%} | "
              f"{r['theirs_median_error']:.1%} / {r['theirs_p90_error']:.1%} | {r['ours_at_least_as_close']:.0%} | "
              f"{r['ours_requests']:.0f} / {r['theirs_requests']:.0f} ({r['ours_requests'] / r['theirs_requests']:.2f}) | "
              f"{r['coverage']:.0%} |")


if __name__ == "__main__":
    main()
