"""A diagnosis in the terminal: symptoms with evidence, then the checks in the order to make them.

Every value is interpolated into Rich markup through `_e` (advisor.escape.markup): target URLs, model
names, versions, evidence, error messages and verdict fields come from outside and show literally."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from advisor.diagnosis import Diagnosis
from advisor.escape import markup as _e
from advisor.experiments.result import CheckSkip, CheckVerdict

COLOR = {"low": "cyan", "moderate": "yellow", "severe": "red", "critical": "bold red"}


def render(d: Diagnosis, console: Console) -> None:
    e = d.engine
    console.print(f"[bold]{_e(d.target)}[/] via {_e(d.via)}, window {d.window_s:.0f}s, "
                  f"{_e(e.kind or '?')} {_e(e.version or '')} {_e(', '.join(e.models))}".rstrip(), highlight=False)
    slo = ", ".join(f"{k} {v:g}" for k, v in d.slo.items() if v is not None)
    console.print(f"[dim]SLOs: {_e(slo)}[/]", highlight=False)
    if not d.findings:
        console.print("[green bold]Healthy:[/] no rule fired.")
    for f in d.findings:
        console.print(f"\n[{COLOR.get(f.severity, 'white')}]{_e(f.severity.upper())}[/] [bold]{_e(f.rule_id)} "
                      f"{_e(f.symptom)}[/]  [dim]layer: {_e(f.layer)}[/]")
        for ev in f.evidence:
            console.print(f"  • {_e(ev.text)}", highlight=False)
            if ev.source:
                console.print(f"    [dim]{_e(ev.source)}[/]", highlight=False)
    if d.findings:
        t = Table(title="\nChecks, in the order to make them", show_edge=False, title_justify="left")
        for col in ("#", "check", "mechanism", "score", "why this rank"):
            t.add_column(col, overflow="fold")
        for c in d.checks:
            flags = (" [yellow](already on)[/]" if c.already else "") + (" [magenta](held back)[/]" if c.held_back else "")
            t.add_row(str(c.rank), f"{_e(c.title)}{flags}\n[dim]{_e(c.rule_id)}/{_e(c.id)}; look at {_e(c.look_at)}[/]",
                      _e(c.mechanism) + (f" {_e(c.direction)}" if c.direction else ""), f"{c.score:.2f}",
                      f"[dim]{_e(c.reason)}[/]")
        console.print(t)
        for c in d.checks:
            if isinstance(c.verdict, CheckVerdict):
                v = c.verdict
                ci = _e(f"[{v.ci[0]:.2f}, {v.ci[1]:.2f}]") if v.ci else "-"
                ratio = f"{v.ratio:.2f}" if v.ratio is not None else "-"
                level = f"{100 * v.level:.3g}%" if v.level else "95%"
                console.print(f"\n[bold]Experiment for check #{c.rank}[/] ({_e(c.mechanism)} -> {_e(v.value)}): "
                              f"[bold]{_e(v.verdict.upper())}[/] on {_e(v.primary_metric)}, candidate/baseline {ratio}, "
                              f"{level} CI {ci}; {_e(v.status)}, baseline restored: {_e(v.baseline_restored)}  "
                              f"[dim]{_e(v.experiment)}[/]", highlight=False)
                if v.stop_reason:
                    used = sum(look.requests or 0 for look in v.looks[-1:])
                    console.print(f"  [dim]stopped: {_e(v.stop_reason)}"
                                  + (f"; {len(v.looks)} look{'s' if len(v.looks) != 1 else ''}, {used} requests"
                                     if v.looks else "") + "[/]", highlight=False)
                if v.workload:
                    console.print(f"  [dim]workload: {_e(v.workload)}[/]", highlight=False)
                if v.verdict == "inconclusive" and v.reason:
                    console.print(f"  [dim]why: {_e(v.reason)}[/]", highlight=False)
                if v.verdict in ("regressed", "no change") and v.fails_means:
                    console.print(f"  if it fails, it means: {_e(v.fails_means)}", highlight=False)
            elif isinstance(c.verdict, CheckSkip):  # every skipped check, whatever its rank, with its reason
                console.print(f"[dim]check #{c.rank} {_e(c.rule_id)}/{_e(c.id)} ({_e(c.mechanism)}"
                              f"{' ' + _e(c.direction) if c.direction else ''}) not tested: {_e(c.verdict.skipped)}[/]",
                              highlight=False)
    if d.not_evaluated:
        console.print("\n[dim]Not evaluated (a signal it needs is missing):[/]")
        for n in d.not_evaluated:
            console.print(f"[dim]  {_e(n.rule_id)}: {_e(n.reason)}[/]", highlight=False)
    for p in d.problems:
        console.print(f"[yellow]note:[/] {_e(p)}", highlight=False)
