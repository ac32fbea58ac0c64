"""From a workload source to measured results: plan, size prompts, run with progress, summarise."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from advisor import manifest as manifest_mod
from advisor.errors import AdvisorError
from advisor.loadgen.metrics import DEFINITIONS, Summary, summarize
from advisor.loadgen.runner import Run, Target, run
from advisor.units import (MAX_CONCURRENCY, MAX_LOAD_DURATION_S, MAX_LOAD_RATE, MAX_LOAD_REQUESTS,
                           MAX_LOOKBACK_S, check_ceiling, duration_text)
from advisor.workload.plan import PlannedRequest, plan
from advisor.workload.spec import Arrival, Workload, check_ceilings, load_workload
from probes.http import HttpConfig
from advisor.loadgen.workers import run_workers
from advisor.workload.prompts import PromptSizer
from advisor.workload.traces import load_trace, trace_requests, trace_to_workload
import importlib.util
import tempfile


class LoadError(AdvisorError, ValueError):
    pass


@dataclass
class Job:
    workload: Workload
    requests: list[PlannedRequest]
    prompts: dict[int, str]
    target: Target
    warmup_s: float
    concurrency: int | None
    duration_s: float | None
    sizing: dict | None = None  # how the prompts were sized: PromptSizer.report()
    sizer: PromptSizer | None = field(default=None, repr=False)  # what sized them, for other texts of the same sizes
    # The arrival rate the source stated (a workload file's, the rate Prometheus measured) before a
    # given rate or concurrency replaced it: a capacity search starts from it and caps at a multiple.
    source_rate: float | None = None

    def prompts_anew(self, requests: list[PlannedRequest], salt: str) -> dict[int, str]:
        """Other prompt texts of the same sizes for these requests (`salt` picks the words): a rerun
        that must not be served from the prefix cache an earlier run filled."""
        if self.sizer is None:
            raise LoadError("the job's prompts were not sized here: no other texts can be made")
        return self.sizer.prompts_for(requests, self.workload, salt=salt)

    def describe(self) -> str:
        w = self.workload
        a = w.arrival
        shape = f"concurrency {a.concurrency}" if a.kind == "concurrency" else f"{a.kind} {a.rate:g} req/s"
        length = f"{w.duration_s:g}s" if w.duration_s else f"{len(self.requests)} requests"
        return (f"{w.name} ({w.source}): {len(self.requests)} requests, {shape}, {length}, "
                f"{len(w.buckets)} buckets, seed {w.seed} -> {self.target.url} model {self.target.model}")


@dataclass
class Result:
    run: Run
    summary: Summary
    manifest: dict
    started_at: datetime


def _workload(workload_file, from_prom, from_trace, window_s, prom_http=None):
    """(workload, the trace's own requests for an exact replay, the trace's prefix lengths)."""
    if workload_file:
        return load_workload(workload_file), None, None
    if from_prom:
        from advisor.workload.telemetry import workload_from_prometheus

        kw = {"timeout": prom_http.timeout, "http": prom_http} if prom_http else {}
        return workload_from_prometheus(from_prom, window_s=window_s, **kw), None, None

    trace = load_trace(from_trace)
    return trace_to_workload(trace), trace_requests(trace), trace.prefix_lengths()


def check_options(*, duration_s: float | None = None, rate: float | None = None, concurrency: int | None = None,
                  warmup_s: float | None = None, window_s: float | None = None) -> None:
    """The command line's load options against the ceilings (advisor/units.py), before any workload
    is read or planned: ValueError in one line naming the option and the ceiling."""
    if duration_s is not None:
        check_ceiling(duration_s, MAX_LOAD_DURATION_S, "--duration", "the longest load run")
    if warmup_s is not None:
        check_ceiling(warmup_s, MAX_LOAD_DURATION_S, "--warmup", "the longest load run")
    if rate is not None:
        check_ceiling(rate, MAX_LOAD_RATE, "--rate", "requests per second one load sends", duration=False)
    if concurrency is not None:
        check_ceiling(concurrency, MAX_CONCURRENCY, "--concurrency", "closed-loop slots", duration=False)
    if rate is not None and duration_s is not None and not concurrency and rate * duration_s > MAX_LOAD_REQUESTS:
        raise ValueError(f"--rate {rate:g} for --duration {duration_text(duration_s)} plans about "
                         f"{rate * duration_s:,.0f} requests, above the ceiling of {MAX_LOAD_REQUESTS:,} on one load")
    if window_s is not None:
        check_ceiling(window_s, MAX_LOOKBACK_S, "--window",
                      "a longer Prometheus range only reads every sample it holds")


def _given(duration_s, rate, concurrency) -> str:
    opts = [f"--duration {duration_text(duration_s)}" if duration_s else "", f"--rate {rate:g}" if rate else "",
            f"--concurrency {concurrency}" if concurrency else ""]
    shown = ", ".join(o for o in opts if o)
    return f"the workload with {shown}" if shown else "the workload"


def prepare(target: str, *, workload_file: Path | None = None, from_prom: str | None = None,
            from_trace: Path | None = None, duration_s: float | None = None, rate: float | None = None,
            concurrency: int | None = None, window_s: float = 3600, warmup_s: float | None = None,
            model: str | None = None, timeout: float = 10.0,
            model_lookup: Callable[[str, float], str] | None = None, http: HttpConfig | None = None,
            prom_http: HttpConfig | None = None,
            context_lookup: Callable[[str, str, float], int | None] | None = None) -> Job:
    """http / prom_http: TLS and credentials for the target and for Prometheus (default: the
    settings', advisor/net.py). context_lookup(target, model, timeout): the model's context window
    in tokens (None: unknown); a planned request past it is refused before any prompt is sized."""
    try:
        check_options(duration_s=duration_s, rate=rate, concurrency=concurrency, warmup_s=warmup_s, window_s=window_s)
    except ValueError as e:
        raise LoadError(str(e)) from None
    w, replay, prefix_lengths = _workload(workload_file, from_prom, from_trace, window_s, prom_http)
    source_rate = w.arrival.rate
    changes: dict = {}
    if duration_s:
        changes["duration_s"] = duration_s
        changes["requests"] = None if not w.requests or replay is None else w.requests
    if concurrency:
        changes["arrival"] = Arrival(kind="concurrency", concurrency=concurrency)
    elif rate:
        kind = w.arrival.kind if w.arrival.kind != "concurrency" else "poisson"
        changes["arrival"] = Arrival(kind=kind, rate=rate, burstiness=w.arrival.burstiness)
    if warmup_s is not None:
        changes["warmup_s"] = warmup_s
    if changes:
        w = Workload.model_validate({**w.model_dump(), **changes})
    exact = replay is not None and not rate and not concurrency
    if not exact:
        check_ceilings(w, _given(duration_s, rate, concurrency))  # before a single request is drawn
    requests = replay if exact else plan(w)
    if replay is not None and duration_s:
        requests = [r for r in requests if r.at_s is None or r.at_s < duration_s]
    span = max((r.at_s for r in requests if r.at_s is not None), default=0.0)
    if exact and span > MAX_LOAD_DURATION_S:
        raise LoadError(f"the trace spans {duration_text(round(span))}, above the ceiling of "
                        f"{duration_text(MAX_LOAD_DURATION_S)} on one load run; give --duration to replay its start")
    if not requests:
        raise LoadError("the workload plans no request (duration too short for the rate?)")
    served = model or w.model or (model_lookup(target, timeout) if model_lookup else None)
    if not served:
        raise LoadError("no model: give --model")
    context = context_lookup(target, served, timeout) if context_lookup else None
    if context:
        from advisor.workload.context import check_fits

        check_fits(requests, context, f"max_model_len of {target.rstrip('/')}/v1/models")

    # Sampled (PromptSizer): counting every prompt would send the target one POST /tokenize per
    # request before the load, a production engine's included.
    sizer = PromptSizer.for_target(target, served, tokenizer=w.tokenizer, timeout=timeout, http=http, verify="sample")
    exact = replay is not None and requests is not None and prefix_lengths
    prompts = sizer.prompts_for(requests, w, prefix_tokens=prefix_lengths if exact else None)
    return Job(workload=w, requests=requests, prompts=prompts,
               target=Target(url=target, model=served, api=w.api, http=http),
               warmup_s=w.warmup_s, concurrency=w.arrival.concurrency if w.arrival.kind == "concurrency" else None,
               duration_s=w.duration_s, sizing=sizer.report(), sizer=sizer, source_rate=source_rate)


async def run_with_progress(job: Job, console: Console, should_abort=None) -> Result:
    started = datetime.now(timezone.utc)
    columns = [TextColumn("[dim]load[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task("requests", total=len(job.requests))
        r = await run(job.target, job.requests, job.prompts, concurrency=job.concurrency,
                      duration_s=job.duration_s if job.concurrency else None,
                      progress=lambda done, total: bar.update(task, completed=done), should_abort=should_abort)
    summary = summarize(r, warmup_s=job.warmup_s)
    return Result(run=r, summary=summary, manifest=build_manifest(job, summary), started_at=started)


def run_workers_with_progress(job: Job, console: Console, workers: int, should_abort=None) -> Result:
    """run_with_progress over `workers` processes (advisor/loadgen/workers.py)."""

    started = datetime.now(timezone.utc)
    columns = [TextColumn(f"[dim]load, {workers} workers[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task("requests", total=len(job.requests))
        r = run_workers(job.target, job.requests, job.prompts, workers=workers, concurrency=job.concurrency,
                        duration_s=job.duration_s if job.concurrency else None,
                        progress=lambda done, total: bar.update(task, completed=done), should_abort=should_abort)
    summary = summarize(r, warmup_s=job.warmup_s)
    manifest = build_manifest(job, summary)
    manifest["load_workers"] = workers
    return Result(run=r, summary=summary, manifest=manifest, started_at=started)


def build_manifest(job: Job, summary: Summary) -> dict:
    w = job.workload
    return {
        "workload": {"name": w.name, "source": w.source, "buckets": [b.model_dump() for b in w.buckets],
                     "prefix": w.prefix.model_dump() if w.prefix else None, "arrival": w.arrival.model_dump(),
                     "cancellation": w.cancellation.model_dump(), "seed": w.seed, "requests": len(job.requests)},
        "target": job.target.url, "model": job.target.model, "api": job.target.api,
        "engine_version": manifest_mod.engine_version(job.target.url, http=job.target.http),
        "load_generator_machine": manifest_mod.machine(),
        "warmup_s": job.warmup_s, "metric_definitions": DEFINITIONS,
        "generator_valid": summary.generator.valid, "generator_why_invalid": summary.generator.why_invalid,
        "prompt_sizing": job.sizing,
    }


EXPORT_SUFFIXES = (".jsonl", ".csv", ".parquet")


def check_export(path: Path) -> None:
    """Before the run, so that no result is lost to a bad destination: a known suffix, a folder that
    exists and takes a new file (tried, not guessed from permission bits), not a directory itself."""

    suffix = path.suffix.lower()
    if suffix not in EXPORT_SUFFIXES:
        raise LoadError(f"--export {path}: unknown format {suffix or '(no suffix)'!r}; use .jsonl, .csv or .parquet")
    if suffix == ".parquet" and not any(importlib.util.find_spec(m) for m in ("pyarrow", "fastparquet")):
        raise LoadError(f"--export {path}: .parquet needs pyarrow (pip install pyarrow); or use .jsonl or .csv")
    folder = path.parent
    if path.is_dir():
        raise LoadError(f"--export {path}: is a directory; give a file name")
    if not folder.is_dir():
        why = "is not a directory" if folder.exists() else "does not exist"
        raise LoadError(f"--export {path}: the folder {folder} {why}")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".advisor-export-check-"):
            pass
    except OSError as e:
        raise LoadError(f"--export {path}: cannot write in {folder}: {e.strerror or e}") from None
    if path.exists() and not path.is_file():  # a FIFO's open for writing waits for a reader
        raise LoadError(f"--export {path}: not a regular file; give a new file name or a file to replace")
    if path.exists():
        try:
            with open(path, "ab"):
                pass
        except OSError as e:
            raise LoadError(f"--export {path}: cannot overwrite it: {e.strerror or e}") from None


def export(result: Result, path: Path) -> None:
    """Written beside the destination and renamed into place: an interrupted export never leaves a
    truncated file under the name the user asked for."""
    import pandas as pd  # 0.5 s on the 2-core host: only the samples' export needs it

    rows = pd.DataFrame([r.to_row() for r in result.run.records])
    suffix = path.suffix.lower()
    if suffix not in (".jsonl", ".csv", ".parquet"):
        raise LoadError(f"cannot export to {path.name}: use .jsonl, .csv or .parquet")
    partial = path.with_name(f".{path.name}.partial")
    try:
        if suffix == ".jsonl":
            rows.to_json(partial, orient="records", lines=True)
        elif suffix == ".csv":
            rows.to_csv(partial, index=False)
        else:
            rows.to_parquet(partial, index=False)
        os.replace(partial, path)
    except (OSError, KeyboardInterrupt) as e:
        partial.unlink(missing_ok=True)
        if isinstance(e, KeyboardInterrupt):
            raise
        raise LoadError(f"cannot write {path}: {e.strerror or e}") from None
