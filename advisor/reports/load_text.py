"""A load run in the terminal: per-bucket latency table and the generator's own validity.

Bucket names, the target, error messages and reasons come from files, traces and the target: they
reach Rich markup only through `_e` (advisor.escape.markup)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from advisor.escape import markup as _e
from advisor.loadgen.metrics import Stats, Summary
from advisor.units import fmt


def _row(name: str, s: Stats) -> list[str]:
    ms = lambda v: fmt(v, "s")  # noqa: E731
    return [_e(name), str(s.requests), str(s.ok), str(s.errors), str(s.cancelled),
            ms(s.ttft.p50), ms(s.ttft.p95), ms(s.tpot.p50), ms(s.tpot.p95), ms(s.itl.p95), ms(s.e2e.p95),
            fmt(s.goodput_rps, "req/s")]


def render(summary: Summary, job, console: Console) -> None:
    console.print(_e(job.describe()), highlight=False)
    t = Table(show_edge=False)
    for c in ("bucket", "sent", "ok", "err", "cancel", "TTFT p50", "TTFT p95", "TPOT p50", "TPOT p95",
              "ITL p95", "E2E p95", "goodput"):
        t.add_column(c, justify="left" if c == "bucket" else "right")
    for name, s in summary.buckets.items():
        t.add_row(*_row(name, s))
    t.add_row("[bold]all[/]", *_row("all", summary.overall)[1:])
    console.print(t)
    g = summary.generator
    if g.planned_rate is not None:
        lag = f"lag p50 {fmt(g.lag_p50_s, 's')} p99 {fmt(g.lag_p99_s, 's')}"
        console.print(f"generator: planned {g.planned_rate:.2f} req/s, achieved {g.achieved_rate or 0:.2f} req/s, {lag}",
                      highlight=False)
    console.print("[green]valid[/]" if g.valid else f"[red bold]INVALID:[/] the load generator fell behind ({_e(g.why_invalid)})",
                  highlight=False)
    if summary.errors_seen:
        console.print("errors: " + _e(", ".join(f"{k} x{v}" for k, v in summary.errors_seen.items())), highlight=False)
    if summary.aborted:
        console.print(f"[yellow]aborted:[/] {_e(summary.aborted)}", highlight=False)
    console.print(f"[dim]measured over {summary.measured_s:.1f}s after {summary.warmup_s:g}s warmup; "
                  "TTFT = sent to first token, TPOT = (E2E - TTFT)/(tokens - 1), ITL pooled chunk gaps[/]")
