"""An experiment in the terminal: the verdict first, then every metric, the blocks and the manifest."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

COLOR = {"improved": "green", "regressed": "red", "no change": "cyan", "inconclusive": "yellow"}


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def render_plan(d, console: Console) -> None:
    console.print("[bold]Dry run[/]: nothing was started or changed.")
    for line in d.describe():
        console.print(f"  {line}", highlight=False)


def render(r, console: Console) -> None:
    ci = f"[{r.ci[0]:.3f}, {r.ci[1]:.3f}]" if r.ci else "-"
    console.print(f"[bold]{r.mechanism} -> {r.value}[/] on {r.deployment}: "
                  f"[{COLOR.get(r.verdict, 'white')} bold]{r.verdict.upper()}[/] on {r.primary_metric} "
                  f"(candidate/baseline {_ratio(r.ratio)}, 95% CI {ci})", highlight=False)
    if r.aborted:
        console.print(f"[red]aborted:[/] {r.aborted}  [dim](samples so far are kept)[/]")
    console.print(("[green]baseline restored:[/] " if r.baseline_restored else "[red bold]baseline NOT restored:[/] ")
                  + (r.restore_note or ""), highlight=False)
    if r.verdict in ("regressed", "no change") and r.fails_means:
        console.print(f"[dim]if it fails, it means: {r.fails_means}[/]")
    t = Table(show_edge=False, title="metrics (lower is better unless noted)", title_justify="left")
    for c in ("metric", "baseline", "candidate", "ratio", "CI", "adj. p", "verdict", "method"):
        t.add_column(c, overflow="fold")
    for m in r.metrics:
        t.add_row(f"{m.metric} {m.statistic}", _fmt(m.baseline_value), _fmt(m.candidate_value), _ratio(m.ratio),
                  f"[{m.ci[0]:.3f}, {m.ci[1]:.3f}]" if m.ci else "-",
                  "-" if m.adjusted_p is None else f"{m.adjusted_p:.3g}",
                  f"[{COLOR.get(m.verdict, 'white')}]{m.verdict}[/]", f"[dim]{m.method}[/]")
    console.print(t)
    if r.quality:
        q = r.quality
        console.print(f"quality guard: {q.exact_match:.0%} identical greedy outputs, {q.token_agreement:.0%} token agreement ({q.note})")
    b = Table(show_edge=False, title="blocks", title_justify="left")
    for c in ("arm", "block", "requests", "ok", "errors", "TTFT p50", "TPOT p50", "E2E p95", "generator"):
        b.add_column(c)
    for x in r.blocks:
        b.add_row(x.arm, str(x.block + 1), str(x.requests), str(x.ok), str(x.errors), _fmt(x.ttft_p50),
                  _fmt(x.tpot_p50), _fmt(x.e2e_p95), "valid" if x.generator_valid else "[red]behind[/]")
    console.print(b)
    m = r.manifest
    if m:
        hw = m.get("hardware", {})
        console.print(f"[dim]manifest: {m['deployment']['engine']} {m.get('engine_version') or ''}, model "
                      f"{m['deployment']['model']}, {hw.get('cpu')} x{hw.get('cores')}, "
                      f"{', '.join(hw.get('gpus') or []) or 'no GPU'}; workload {m['workload']['name']} "
                      f"({m['concurrency_or_rate']}, seed {m['seeds']['workload']}); blocks {' '.join(m['block_order'])}[/]",
                      highlight=False)


def _fmt(v) -> str:
    if v is None:
        return "-"
    return f"{v * 1000:.1f} ms" if v < 1 else f"{v:.3f} s"
