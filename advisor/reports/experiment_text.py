"""An experiment in the terminal: the verdict first, then every metric, the blocks and the manifest.

Values are interpolated into Rich markup through `_e` (advisor.escape.markup): the deployment's
name, the knob's value, error text, model and hardware names come from files, targets and the user."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from advisor.escape import markup as _e

COLOR = {"improved": "green", "regressed": "red", "no change": "cyan", "inconclusive": "yellow"}


def render_plan(d, console: Console, manifests: str | None = None) -> None:
    console.print("[bold]Dry run[/]: nothing was started or changed.")
    for line in d.describe():
        console.print(f"  {_e(line)}", highlight=False)
    if manifests:
        console.print("[bold]The arms' manifests[/] (kubectl apply -f accepts them; the knob's line is marked):")
        console.print(_e(manifests), highlight=False, soft_wrap=True)


def render(r, console: Console) -> None:
    """An ExperimentResult, drawn from the same view as the HTML report and the dashboard."""
    from advisor.reports.views import experiment_view

    x = experiment_view(r, charts_on=False)
    console.print(f"[bold]{_e(x.title)}[/] on {_e(x.deployment)}: "
                  f"[{COLOR.get(x.verdict, 'white')} bold]{_e(x.verdict.upper())}[/] on {_e(x.primary)} "
                  f"(candidate/baseline {_e(x.ratio)}, {_e(x.level)} CI {_e(x.ci)})", highlight=False)
    if x.stop_reason:
        console.print(f"[dim]stopped:[/] {_e(x.stop_reason)}", highlight=False)
    for i, look in enumerate(x.looks, start=1):
        console.print(f"[dim]  look {i}: {look['blocks']} blocks per arm, {look['requests']} requests, ratio "
                      f"{_e(look['ratio'])}, {_e(look['level'])} CI {_e(look['ci'])}: {_e(look['verdict'])}"
                      + (f" ({_e(look['reason'])})" if look['reason'] else "") + "[/]",
                      highlight=False)
    if x.verdict == "inconclusive" and x.reason and not x.aborted:
        console.print(f"[yellow]why:[/] {_e(x.reason)}", highlight=False)
    if x.aborted:
        console.print(f"[red]aborted:[/] {_e(x.aborted)}  [dim](samples so far are kept)[/]", highlight=False)
    restored = r.baseline_restored
    console.print(("[green]baseline restored:[/] " if restored else "[red bold]baseline NOT restored:[/] ")
                  + _e(x.restore_note or ""), highlight=False)
    if x.verdict in ("regressed", "no change") and x.fails_means:
        console.print(f"[dim]if it fails, it means: {_e(x.fails_means)}[/]", highlight=False)
    t = _table("metrics (lower is better unless noted)",
               ("metric", "baseline", "candidate", "ratio", "CI", "adj. p", "verdict", "method"))
    for m in x.metrics:
        t.add_row(_e(m.name), _e(m.baseline), _e(m.candidate), _e(m.ratio), _e(m.ci), _e(m.adjusted_p),
                  f"[{COLOR.get(m.verdict, 'white')}]{_e(m.verdict)}[/]", f"[dim]{_e(m.method)}[/]")
    console.print(t)
    if x.explanation:
        console.print(f"[yellow]why:[/] {_e(x.explanation)}", highlight=False)
    for arm, line in x.models:
        console.print(f"{arm} model: {_e(line)}", highlight=False)
    if x.memory:
        console.print(f"resident memory: {_e(x.memory)}", highlight=False)
    if x.cost:
        console.print(f"cost: {_e(x.cost)}", highlight=False)
    if x.quality:
        console.print(f"quality guard: {_e(x.quality)}", highlight=False)
    if x.capacity:
        c = _table("capacity at the SLO per arm (trials in turn on both arms)",
                   ("arm", "capacity", "trials", "requests", "time", "goodput where it held"))
        for row in x.capacity:
            c.add_row(_e(row.arm), _e(row.summary), str(row.trials), str(row.requests), _e(row.seconds),
                      _e(row.goodput))
        console.print(c)
    else:
        b = _table("blocks", ("arm", "block", "restart", "warmup", "requests", "ok", "errors", "TTFT p50",
                              "TPOT p50", "E2E p95", "outside", "generator"))
        for k in x.blocks:
            b.add_row(_e(k.arm), str(k.block), _e(k.restart), _e(k.warmup), str(k.requests), str(k.ok),
                      str(k.errors), _e(k.ttft_p50), _e(k.tpot_p50), _e(k.e2e_p95), _e(k.outside),
                      "valid" if k.valid else f"[red]behind, not judged[/] [dim]{_e(k.why_invalid or '')}[/]")
        console.print(b)
    if x.buckets:
        k = _table("per bucket: candidate/baseline of the medians, CI, verdict (exploratory: not corrected for "
                   "the number of buckets)", ("bucket", "requests", "TTFT p50 (prefill)", "TPOT p50 (decode)"))
        for row in x.buckets:
            k.add_row(_e(row.bucket), row.requests, _e(row.ttft), _e(row.tpot))
        console.print(k)
    if x.server:
        s = _table("server readouts per arm (the engines' own /metrics, median of the valid blocks; * the knob's "
                   "watched signals)", ("signal", "baseline", "candidate", "change"))
        for row in x.server:
            s.add_row(_e(row.signal) + (" *" if row.watched else ""), _e(row.baseline), _e(row.candidate),
                      _e(row.change))
        console.print(s)
    for note in x.server_notes:
        console.print(f"[yellow]server:[/] {_e(note)}", highlight=False)
    if x.calibration:
        c = _table("noise measured (stored for later plans: advisor experiment --plan)",
                   ("readout", "block log-SD", "sampling", "drift", "blocks"))
        for n in x.calibration:
            c.add_row(_e(n.readout), n.block_sd, n.sampling_sd, n.drift_sd, str(n.blocks))
        console.print(c)
    if x.manifest_line:
        console.print(f"[dim]manifest: {_e(x.manifest_line)}[/]", highlight=False)


def _table(title: str, columns: tuple[str, ...]) -> Table:
    t = Table(show_edge=False, title=title, title_justify="left")
    for c in columns:
        t.add_column(c, overflow="fold")
    return t


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
        from advisor.experiments.design.planning import CONSERVATIVE_REQUESTS

        console.print(f"[dim]default: a stated conservative noise, not measured (block log-SD per statistic at "
                      f"{CONSERVATIVE_REQUESTS} requests per block, half of it drift); run advisor experiment --aa "
                      "to measure this target's own[/]", highlight=False)
