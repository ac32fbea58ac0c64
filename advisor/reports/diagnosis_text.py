"""A diagnosis in the terminal: symptoms with evidence, then the checks in the order to make them."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from advisor.diagnosis import Diagnosis

COLOR = {"low": "cyan", "moderate": "yellow", "severe": "red", "critical": "bold red"}


def render(d: Diagnosis, console: Console) -> None:
    e = d.engine
    console.print(f"[bold]{d.target}[/] via {d.via}, window {d.window_s:.0f}s, "
                  f"{e.kind or '?'} {e.version or ''} {', '.join(e.models)}".rstrip())
    slo = ", ".join(f"{k} {v:g}" for k, v in d.slo.items() if v is not None)
    console.print(f"[dim]SLOs: {slo}[/]")
    if not d.findings:
        console.print("[green bold]Healthy:[/] no rule fired.")
    for f in d.findings:
        console.print(f"\n[{COLOR[f.severity]}]{f.severity.upper()}[/] [bold]{f.rule_id} {f.symptom}[/]  [dim]layer: {f.layer}[/]")
        for ev in f.evidence:
            console.print(f"  • {ev.text}", highlight=False)
            if ev.source:
                console.print(f"    [dim]{ev.source}[/]", highlight=False)
    if d.findings:
        t = Table(title="\nChecks, in the order to make them", show_edge=False, title_justify="left")
        for col in ("#", "check", "mechanism", "score", "why this rank"):
            t.add_column(col, overflow="fold")
        for c in d.checks:
            flags = (" [yellow](already on)[/]" if c.already else "") + (" [magenta](held back)[/]" if c.held_back else "")
            t.add_row(str(c.rank), f"{c.title}{flags}\n[dim]{c.rule_id}/{c.id}; look at {c.look_at}[/]",
                      c.mechanism, f"{c.score:.2f}", f"[dim]{c.reason}[/]")
        console.print(t)
        for c in d.checks:
            if c.verdict and "verdict" in c.verdict:
                v = c.verdict
                ci = f"[{v['ci'][0]:.2f}, {v['ci'][1]:.2f}]" if v.get("ci") else "-"
                ratio = f"{v['ratio']:.2f}" if v.get("ratio") is not None else "-"
                console.print(f"\n[bold]Experiment for check #{c.rank}[/] ({c.mechanism} -> {v['value']}): "
                              f"[bold]{v['verdict'].upper()}[/] on {v['primary_metric']}, candidate/baseline {ratio}, "
                              f"95% CI {ci}; {v['status']}, baseline restored: {v['baseline_restored']}  [dim]{v['experiment']}[/]",
                              highlight=False)
                if v.get("workload"):
                    console.print(f"  [dim]workload: {v['workload']}[/]", highlight=False)
                if v["verdict"] in ("regressed", "no change") and v.get("fails_means"):
                    console.print(f"  if it fails, it means: {v['fails_means']}", highlight=False)
            elif c.verdict and "skipped" in c.verdict and c.rank <= 3:
                console.print(f"[dim]check #{c.rank} not tested: {c.verdict['skipped']}[/]", highlight=False)
    if d.not_evaluated:
        console.print("\n[dim]Not evaluated (a signal it needs is missing):[/]")
        for n in d.not_evaluated:
            console.print(f"[dim]  {n.rule_id}: {n.reason}[/]", highlight=False)
    for p in d.problems:
        console.print(f"[yellow]note:[/] {p}")
