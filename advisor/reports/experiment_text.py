"""An experiment in the terminal: the verdict first, then every metric, the blocks and the manifest.

Values are interpolated into Rich markup through `_e` (advisor.escape.markup): the deployment's
name, the knob's value, error text, model and hardware names come from files, targets and the user."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from advisor.escape import markup as _e

COLOR = {"improved": "green", "regressed": "red", "no change": "cyan", "inconclusive": "yellow"}


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def render_plan(d, console: Console) -> None:
    console.print("[bold]Dry run[/]: nothing was started or changed.")
    for line in d.describe():
        console.print(f"  {_e(line)}", highlight=False)


def render(r, console: Console) -> None:
    ci = _e(f"[{r.ci[0]:.3f}, {r.ci[1]:.3f}]") if r.ci else "-"
    level = f"{100 * r.metrics[0].level:.3g}%" if r.metrics else "95%"
    what = "A/A (baseline against itself)" if r.mechanism == "aa" else f"{_e(r.mechanism)} -> {_e(r.value)}"
    console.print(f"[bold]{what}[/] on {_e(r.deployment)}: "
                  f"[{COLOR.get(r.verdict, 'white')} bold]{_e(r.verdict.upper())}[/] on {_e(r.primary_metric)} "
                  f"(candidate/baseline {_ratio(r.ratio)}, {level} CI {ci})", highlight=False)
    if r.stop_reason:
        console.print(f"[dim]stopped:[/] {_e(r.stop_reason)}", highlight=False)
    for i, look in enumerate(r.looks, start=1):
        lci = _e(f"[{look.ci[0]:.3f}, {look.ci[1]:.3f}]") if look.ci else "-"
        console.print(f"[dim]  look {i}: {look.blocks} blocks per arm, {look.requests or 0} requests, ratio "
                      f"{_ratio(look.ratio)}, {100 * (1 - look.alpha):.3g}% CI {lci}: {_e(look.verdict)}[/]",
                      highlight=False)
    if r.verdict == "inconclusive" and r.reason and not r.aborted:
        console.print(f"[yellow]why:[/] {_e(r.reason)}", highlight=False)
    if r.aborted:
        console.print(f"[red]aborted:[/] {_e(r.aborted)}  [dim](samples so far are kept)[/]", highlight=False)
    console.print(("[green]baseline restored:[/] " if r.baseline_restored else "[red bold]baseline NOT restored:[/] ")
                  + _e(r.restore_note or ""), highlight=False)
    if r.verdict in ("regressed", "no change") and r.fails_means:
        console.print(f"[dim]if it fails, it means: {_e(r.fails_means)}[/]", highlight=False)
    t = Table(show_edge=False, title="metrics (lower is better unless noted)", title_justify="left")
    for c in ("metric", "baseline", "candidate", "ratio", "CI", "adj. p", "verdict", "method"):
        t.add_column(c, overflow="fold")
    for m in r.metrics:
        t.add_row(_e(f"{m.metric} {m.statistic}"), _fmt(m.baseline_value), _fmt(m.candidate_value), _ratio(m.ratio),
                  _e(f"[{m.ci[0]:.3f}, {m.ci[1]:.3f}]") if m.ci else "-",
                  "-" if m.adjusted_p is None else f"{m.adjusted_p:.3g}",
                  f"[{COLOR.get(m.verdict, 'white')}]{_e(m.verdict)}[/]", f"[dim]{_e(m.method)}[/]")
    console.print(t)
    if r.quality:
        q = r.quality
        console.print(f"quality guard: {q.exact_match:.0%} identical greedy outputs, {q.token_agreement:.0%} token "
                      f"agreement ({_e(q.note)})", highlight=False)
    b = Table(show_edge=False, title="blocks", title_justify="left")
    for c in ("arm", "block", "restart", "warmup", "requests", "ok", "errors", "TTFT p50", "TPOT p50", "E2E p95",
              "generator"):
        b.add_column(c)
    for x in r.blocks:
        b.add_row(_e(x.arm), str(x.block + 1), "-" if x.restart_s is None else f"{x.restart_s:.1f} s",
                  str(x.warmup_requests or "-"), str(x.requests), str(x.ok), str(x.errors), _fmt(x.ttft_p50),
                  _fmt(x.tpot_p50), _fmt(x.e2e_p95),
                  "valid" if x.generator_valid else f"[red]behind, not judged[/] [dim]{_e(x.why_invalid or '')}[/]")
    console.print(b)
    if r.calibration:
        c = Table(show_edge=False, title="noise measured (stored for later plans: advisor experiment --plan)",
                  title_justify="left")
        for col in ("readout", "block log-SD", "sampling", "drift", "blocks"):
            c.add_column(col)
        for n in r.calibration:
            c.add_row(_e(f"{n.metric} {n.statistic}"), f"{n.block_sd:.3f}", f"{n.sampling_sd:.3f}",
                      f"{n.drift_sd:.3f}", str(n.blocks))
        console.print(c)
    m = r.manifest
    if m:
        hw = m.get("hardware", {})
        console.print("[dim]" + _e(f"manifest: {m['deployment']['engine']} {m.get('engine_version') or ''}, model "
                                   f"{m['deployment']['model']}, {hw.get('cpu')} x{hw.get('cores')}, "
                                   f"{', '.join(hw.get('gpus') or []) or 'no GPU'}; workload {m['workload']['name']} "
                                   f"({m['concurrency_or_rate']}, seed {m['seeds']['workload']}); "
                                   f"blocks {' '.join(m['block_order'])}") + "[/]", highlight=False)


def _fmt(v) -> str:
    if v is None:
        return "-"
    return f"{v * 1000:.1f} ms" if v < 1 else f"{v:.3f} s"


def render_plans(rows, console: Console, as_json: bool = False) -> None:
    """`advisor experiment --plan` without a mechanism: a plan per readout."""
    if as_json:
        from advisor.escape import json_text

        print(json_text([{"metric": r.metric, "statistic": r.statistic, "problem": r.problem,
                          "noise_source": r.noise.source, "noise_requests_per_block": r.noise.requests,
                          "block_log_sd": r.noise.sd(r.plan.requests_per_block if r.plan else r.noise.requests),
                          **({"max_blocks_per_arm": r.plan.max_blocks, "requests_per_block": r.plan.requests_per_block,
                              "first_look": r.plan.stopping.first_look, "power": r.plan.power,
                              "expected_blocks_per_arm": r.plan.expected_blocks} if r.plan else {})} for r in rows]))
        return
    if not rows:
        return
    first = next((r.plan for r in rows if r.plan), None)
    if first is not None:
        console.print(f"[bold]Plans[/] for a {first.effect:.0%} effect at {first.target_power:.0%} power, "
                      "stopping at the first decisive look:", highlight=False)
    t = Table(show_edge=False)
    for c in ("readout", "block log-SD", "requests/block", "max blocks/arm", "first look", "power",
              "expected blocks/arm", "noise from"):
        t.add_column(c, overflow="fold")

    def short(source: str) -> str:
        return "default" if source.startswith("conservative default") else source.split(" (")[0]

    for r in rows:
        if r.plan is None:
            t.add_row(_e(f"{r.metric} {r.statistic}"), f"{r.noise.sd(r.noise.requests):.3f}", str(r.noise.requests),
                      "", "", "", "", f"{_e(short(r.noise.source))}: [red]{_e(r.problem or '')}[/]")
            continue
        p = r.plan
        t.add_row(_e(f"{r.metric} {r.statistic}"), f"{p.noise.sd(p.requests_per_block):.3f}", str(p.requests_per_block),
                  str(p.max_blocks), str(p.stopping.first_look), f"{p.power:.0%}", f"{p.expected_blocks:.1f}",
                  _e(short(p.noise.source)))
    console.print(t)
    for source in dict.fromkeys(r.noise.source for r in rows if short(r.noise.source) != "default"):
        console.print(f"[dim]{_e(short(source))}: {_e(source)}[/]", highlight=False)
    if any(short(r.noise.source) == "default" for r in rows):
        from advisor.experiments.planning import CONSERVATIVE_REQUESTS

        console.print(f"[dim]default: a stated conservative noise, not measured (block log-SD per statistic at "
                      f"{CONSERVATIVE_REQUESTS} requests per block, half of it drift); run advisor experiment --aa "
                      "to measure this target's own[/]", highlight=False)
