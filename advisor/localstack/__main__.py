"""The main job on a local default: a real engine made to queue, watched by Prometheus, diagnosed,
and the top check proved by an A/B experiment.

    python -m advisor.localstack [--window 60] [--concurrency 8] [--no-experiment] ...

Starts the CPU vLLM engine with two misconfigurations, --max-num-seqs 2 and prefix caching off
although every prompt starts with the same long system prompt, and a Prometheus scraping it every
2 s; drives more concurrent requests than the engine admits so that a queue forms, waits until
Prometheus holds a full window of that load, stops the load, and runs the diagnosis service (what
`advisor diagnose --experiment N` runs; --experiments N, default 1) against it in this process: the diagnosis, and the top checks'
experiments against the real engine (each candidate on a second port, the baseline left serving),
each replaying the traffic driven here (declared with --workload: the shared system prompt cannot be
read from the metrics while prefix caching is off). Progress goes to stderr ("[local] ..."); the
report goes to stdout. Both servers stop on exit or Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

from advisor import interrupts
from advisor.escape import plain
from advisor.localstack.deployment import write_deployment
from advisor.localstack.engine import EngineError, LocalEngine
from advisor.localstack.prometheus import LocalPrometheus, PrometheusError
from advisor.localstack.traffic import DriveResult, drive_sync
from advisor.app.diagnose import DiagnoseRequest, diagnose
from advisor.app.snapshot import Source
from advisor.errors import AdvisorError
from rich.console import Console
import os
import secrets
import yaml

SCRAPE_S = 2


def log(msg: str) -> None:
    print(f"[local] {plain(msg)}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m advisor.localstack", description=__doc__.split("\n\n")[0])
    p.add_argument("--window", type=int, default=60, help="probe window in seconds (default 60)")
    p.add_argument("--max-num-seqs", type=int, default=2, help="engine admission limit (default 2)")
    p.add_argument("--requests", type=int, default=24, help="requests per traffic round (default 24)")
    p.add_argument("--concurrency", type=int, default=24, help="requests in flight (default 24)")
    # Long prompts that share a system prompt, long answers: the queue behind --max-num-seqs is then
    # both decode time (which a wider batch shares) and prefill time (which prefix caching saves), so
    # two checks have a real effect to find. Measured on a 2-core EPYC, 24 in flight, TTFT p95 of
    # 48-request rounds: 21 s at 2 slots without caching, 14-15 s with caching, 15-16 s at 8 slots.
    # With 64-word prompts 8 slots were decisive at once (ratio 0.03) but caching changed nothing
    # (11-14 s either way): prefill was too small a share of TTFT (2026-12-02).
    p.add_argument("--prompt-words", type=int, default=512, help="prompt length in words (default 512)")
    p.add_argument("--system-prompt-words", type=int, default=480,
                   help="leading words every prompt of a round shares, as a system prompt (default 480)")
    p.add_argument("--prefix-caching", action="store_true",
                   help="start the engine with prefix caching on (default off: the demo's second misconfiguration)")
    p.add_argument("--max-tokens", type=int, default=128, help="output tokens per request (default 128)")
    p.add_argument("--no-experiment", action="store_true", help="diagnose only; skip the A/B experiment")
    p.add_argument("--experiments", type=int, default=1, metavar="N",
                   help="prove the top N testable checks, each with its own experiment (default 1); the checks "
                        "that cannot be tested here say why")
    p.add_argument("--serve", type=int, metavar="PORT", default=None,
                   help="instead of the CLI diagnosis, keep the engine and Prometheus up and run the dashboard "
                        "(advisor serve) on 127.0.0.1:PORT until Ctrl-C, with an advisor.yaml naming them")
    args = p.parse_args(argv)
    if args.experiments < 1:
        p.error("--experiments: at least 1 (--no-experiment diagnoses only)")
    if not 0 <= args.system_prompt_words < args.prompt_words:
        p.error("--system-prompt-words: from 0 to less than --prompt-words")
    return args


def traffic(url: str, args: argparse.Namespace, stop: threading.Event, deadline: float, totals: DriveResult) -> None:
    """Rounds of load until told to stop: on 2 CPU cores one round lasts seconds, not a window."""
    seed = 0
    while not stop.is_set() and time.monotonic() < deadline:
        r = drive_sync(
            url, requests=args.requests, concurrency=args.concurrency, prompt_words=args.prompt_words,
            shared_prefix_words=args.system_prompt_words, max_tokens=args.max_tokens, seed=seed,
            total_timeout=max(1.0, deadline - time.monotonic()),
        )
        # A new seed per round: repeated prompts would hit the prefix cache and hide the queue.
        seed += 1
        totals.requests += r.requests
        totals.ok += r.ok
        totals.errors += r.errors
        totals.ttft_s += r.ttft_s
        totals.first_error = totals.first_error or r.first_error


def write_workload(args: argparse.Namespace, path: Path) -> Path:
    """The traffic driven here as a workload spec (one word of the tiny model is one token)."""

    spec = {"name": "local-demo", "source": "the traffic python -m advisor.localstack drives",
            "requests": args.requests, "arrival": {"kind": "concurrency", "concurrency": args.concurrency},
            "buckets": [{"prompt_tokens": args.prompt_words, "output_tokens": args.max_tokens}]}
    if args.system_prompt_words:
        spec["prefix"] = {"groups": 1, "tokens": args.system_prompt_words, "share": 1.0}
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def run_diagnosis(prom_url: str, window: int, deployment: Path | None, experiments: int = 1,
                  workload: Path | None = None) -> int:
    """The diagnosis service in this process, its report on stdout as `advisor diagnose` prints it.
    An interrupt during an experiment ends it after the baseline's restore (advisor/interrupts.py)."""

    from advisor.reports.diagnosis_text import render

    n = experiments if deployment else 0
    request = DiagnoseRequest(source=Source(prom_url=prom_url, window=f"{window}s"), deployment=deployment,
                              experiments=n, workload=workload if n else None)
    log(f"diagnosing {prom_url} over {window} s" + (f", proving the top {n} check(s)" if n else ""))
    try:
        outcome = diagnose(request, say=log)
    except AdvisorError as e:
        log(f"error: {e}")
        return 2
    render(outcome.diagnosis, Console(soft_wrap=False, width=None if sys.stdout.isatty() else 140), outcome.experiments)
    return 130 if interrupts.received() else 0


def serve_dashboard(engine: LocalEngine, prom: LocalPrometheus, args: argparse.Namespace) -> int:
    """The dashboard (advisor serve) in this process, beside the local deployment, with an
    advisor.yaml that names it, until Ctrl-C; experiments it started restore their baselines first."""


    from advisor.web.serve import serve

    home = Path(tempfile.mkdtemp(prefix="advisor-local-"))
    write_deployment(engine, home / "deployment.yaml")
    (home / "advisor.yaml").write_text(yaml.safe_dump({
        # A 10-minute window: a diagnosis run from the dashboard still sees the queue just driven.
        "deployments": [{"name": "local", "prom_url": prom.url, "deployment": "deployment.yaml", "window": "10m",
                         "diagnose_every": "15m"}],
        "weekly_report": {"cron": "0 8 * * MON", "out_dir": "reports"}}, sort_keys=False))
    token = os.environ.get("ADVISOR_API_TOKEN") or secrets.token_urlsafe(16)
    log(f"advisor.yaml: {home / 'advisor.yaml'}")
    log(f"dashboard: http://127.0.0.1:{args.serve}/  (API token for its actions: {token}); Ctrl-C stops everything")
    try:
        serve(home / "advisor.yaml", port=args.serve, token=token, say=log)
    except AdvisorError as e:
        log(f"error: {e}")
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # systemd, CI and `timeout` stop us with SIGTERM: unwind through the finally below like Ctrl-C,
    # and an experiment's restore is finished before either ends it.
    interrupts.install(log)
    t0 = time.monotonic()
    engine = LocalEngine(max_num_seqs=args.max_num_seqs,
                         extra_args=[] if args.prefix_caching else ["--no-enable-prefix-caching"])
    prom: LocalPrometheus | None = None
    stop = threading.Event()
    totals = DriveResult(requests=0)
    try:
        log(f"starting vLLM (tiny-llama, --max-num-seqs {args.max_num_seqs}, prefix caching "
            f"{'on' if args.prefix_caching else 'off'}) on {engine.url}; log: {engine.log_dir}")
        engine.start().wait_healthy()
        log(f"engine healthy after {engine.healthy_after_s:.0f} s"
            + (f"; {engine.placement}" if engine.placement else ""))
        prom = LocalPrometheus([engine.target], scrape_interval=f"{SCRAPE_S}s").start()
        log(f"prometheus ready on {prom.url} after {prom.ready_after_s:.1f} s, scraping every {SCRAPE_S} s")
        # Counters need a sample from before the load, or rate() misses its start.
        time.sleep(2 * SCRAPE_S)
        hold = args.window + 2 * SCRAPE_S
        log(
            f"driving load: rounds of {args.requests} requests, {args.concurrency} in flight, "
            f"{args.prompt_words}-word prompts ({args.system_prompt_words} of them a shared system prompt), "
            f"{args.max_tokens} output tokens; probing in {hold} s"
        )
        worker = threading.Thread(
            target=traffic, args=(engine.url, args, stop, time.monotonic() + hold + 330, totals), daemon=True
        )
        worker.start()
        time.sleep(hold)
        if not worker.is_alive():
            log(f"the load stopped early: {totals.first_error or 'no error recorded'}")
            return 1
        # The window now holds the queue; stop the load so the experiment has the engine to itself.
        stop.set()
        worker.join(timeout=120)
        if args.serve is not None:
            return serve_dashboard(engine, prom, args)
        # The spec also tells the diagnosis which model folder the engine serves (its structure).
        home = Path(tempfile.mkdtemp(prefix="advisor-local-"))
        deployment = write_deployment(engine, home / "deployment.yaml")
        workload = write_workload(args, home / "workload.yaml")
        log(f"deployment spec: {deployment}; the traffic driven here: {workload}")
        rc = run_diagnosis(prom.url, args.window, deployment, experiments=0 if args.no_experiment else args.experiments,
                           workload=workload)
        log(f"load: {totals.ok} ok, {totals.errors} errors of {totals.requests} requests")
        if totals.first_error:
            log(f"first load error: {totals.first_error}")
        return rc
    except (EngineError, PrometheusError) as e:
        log(str(e))
        return 1
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        stop.set()
        log("stopping prometheus and the engine")
        if prom is not None:
            prom.stop()
        engine.stop()
        log(f"done in {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
