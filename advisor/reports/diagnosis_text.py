"""A diagnosis in the terminal: symptoms with evidence, then the checks in the order to make them.

Drawn from advisor.reports.views.DiagnosisView, the view the markdown and HTML reports and the
dashboard use. Every value is interpolated into Rich markup through `_e` (advisor.escape.markup):
target URLs, model names, versions, evidence, error messages and verdict fields come from outside
and show literally."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from advisor.diagnosis import Diagnosis
from advisor.escape import markup as _e
from advisor.experiments.result import ExperimentResult
from advisor.reports.views import diagnosis_view, experiment_views

COLOR = {"warning": "magenta", "low": "cyan", "moderate": "yellow", "severe": "red", "critical": "bold red"}


def render(d: Diagnosis, console: Console, results: Sequence[ExperimentResult] = ()) -> None:
    """`results`: the experiments its checks ran, as run (a stored diagnosis' come from the store)."""
    v = diagnosis_view(d, experiments=experiment_views(results, charts_on=False), charts_on=False)
    console.print(f"[bold]{_e(v.target)}[/] via {_e(v.via)}, window {_e(v.window.replace(' ', ''))}, "
                  f"{_e(v.engine)} {_e(', '.join(v.models))}".rstrip(), highlight=False)
    console.print(f"[dim]SLOs: {_e(v.slo)}[/]", highlight=False)
    if v.model_line:
        console.print(f"[dim]model: {_e(v.model_line)}[/]", highlight=False)
    if v.tokenization_line:
        console.print(f"[dim]tokenization: {_e(v.tokenization_line)}[/]", highlight=False)
    if v.cost_line:
        console.print(f"cost: {_e(v.cost_line)}", highlight=False)
    if not v.findings:
        console.print("[green bold]Healthy:[/] no rule fired.")
    elif v.healthy:
        console.print(f"[green bold]{_e(v.status_line.capitalize())}[/]: every SLO holds, but a signal is near its "
                      "SLO while the mechanism behind it dominates.", highlight=False)
    for f in v.findings:
        console.print(f"\n[{COLOR.get(f.severity, 'white')}]{_e(f.severity.upper())}[/] [bold]{_e(f.rule_id)} "
                      f"{_e(f.symptom)}[/]  [dim]layer: {_e(f.layer)}[/]")
        for ev in f.evidence:
            console.print(f"  • {_e(ev.text)}", highlight=False)
            if ev.source:
                console.print(f"    [dim]{_e(ev.source)}[/]", highlight=False)
    if v.findings:
        t = Table(title="\nChecks, in the order to make them", show_edge=False, title_justify="left")
        for col in ("#", "check", "mechanism", "score", "why this rank"):
            t.add_column(col, overflow="fold")
        for c in v.checks:
            flags = (" [yellow](already on)[/]" if c.already else "") + (" [magenta](held back)[/]" if c.held_back else "")
            t.add_row(str(c.rank), f"{_e(c.title)}{flags}\n[dim]{_e(c.rule_id)}/{_e(c.check_id)}; look at {_e(c.look_at)}[/]",
                      _e(c.mechanism) + (f" {_e(c.direction)}" if c.direction else ""), c.score, f"[dim]{_e(c.reason)}[/]")
        console.print(t)
        by_id = {x.key: x for x in v.experiments}
        for c in v.checks:
            if c.outcome is not None:
                o = c.outcome
                x = by_id.get(o.experiment)
                title = x.title if x is not None else c.mechanism
                console.print(f"\n[bold]Experiment for check #{c.rank}[/] ({_e(title)}): [bold]{_e(o.verdict.upper())}[/] "
                              f"{_e(o.detail)}" + (f"; {_e(o.status)}, baseline {_e(o.restored)}" if o.status else "")
                              + f"  [dim]{_e(o.experiment)}[/]", highlight=False)
                if o.looks:
                    console.print(f"  [dim]{o.looks} look{'s' if o.looks != 1 else ''}, {o.requests} requests[/]",
                                  highlight=False)
                if o.workload:
                    console.print(f"  [dim]workload: {_e(o.workload)}[/]", highlight=False)
                if x is not None:
                    _per_arm(x, console)
                if o.fails_means:
                    console.print(f"  if it fails, it means: {_e(o.fails_means)}", highlight=False)
            elif c.skipped is not None:  # every skipped check, whatever its rank, with its reason
                console.print(f"[dim]check #{c.rank} {_e(c.rule_id)}/{_e(c.check_id)} ({_e(c.mechanism)}"
                              f"{' ' + _e(c.direction) if c.direction else ''}) not tested: {_e(c.skipped)}[/]",
                              highlight=False)
    if v.not_evaluated:
        console.print("\n[dim]Not evaluated (a signal it needs is missing):[/]")
        for rule, why in v.not_evaluated:
            console.print(f"[dim]  {_e(rule)}: {_e(why)}[/]", highlight=False)
    for p in v.problems:
        console.print(f"[yellow]note:[/] {_e(p)}", highlight=False)


def _per_arm(x, console: Console) -> None:
    """The experiment's readouts per arm, client then server, one line each: enough to see why the
    verdict went the way it did; `advisor report experiment ID` has the blocks and the looks."""
    if x.metrics:
        console.print("  client, baseline -> candidate: " + "; ".join(
            f"{_e(m.name)} {_e(m.baseline)} -> {_e(m.candidate)} ({_e(m.ratio)}, {_e(m.verdict)})" for m in x.metrics),
            highlight=False)
    if x.server:
        console.print("  server, baseline -> candidate: " + "; ".join(
            f"{_e(r.signal)}{'*' if r.watched else ''} {_e(r.baseline)} -> {_e(r.candidate)}" for r in x.server)
            + "  [dim](* watched by this knob)[/]", highlight=False)
    for note in x.server_notes:
        console.print(f"  [yellow]server:[/] {_e(note)}", highlight=False)
