"""advisor rules: the rule base and its help pages."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from advisor import escape
from advisor.cli._app import app
from advisor.cli._common import err, fail, out

rules_app = typer.Typer(help="The rule base: what each rule detects, its evidence, and the settings to change.",
                        no_args_is_help=True)
app.add_typer(rules_app, name="rules")


@rules_app.command("list")
def rules_list() -> None:
    """One line per rule: id, layer, symptom."""
    from advisor.diagnosis import RuleError, load_rules

    try:
        rules = load_rules()
    except RuleError as e:
        raise fail(str(e)) from None
    for r in rules:
        out.print(f"[bold]{escape.markup(r.id)}[/]  {escape.markup(f'{r.layer:<20} {r.symptom}')}", highlight=False)


@rules_app.command("show")
def rules_show(rule_id: Annotated[str, typer.Argument(help="A rule id, e.g. ADV001.")]) -> None:
    """A rule's help page: what it detects, the evidence, what to change, its checks and thresholds."""
    from advisor.diagnosis import RuleError, load_rules

    try:
        rules = {r.id: r for r in load_rules()}
    except RuleError as e:
        raise fail(str(e)) from None
    rule = rules.get(rule_id.upper())
    if rule is None:
        raise fail(f"no rule {rule_id!r}; known: {', '.join(rules)}")
    from advisor.reports.markdown import render as render_md

    print(render_md("rule.md.j2", r=rule))


@rules_app.command("export")
def rules_export(
    format_: Annotated[str, typer.Option("--format", help="prometheus: a rule file for rule_files; prometheus-operator: the same groups in a PrometheusRule object; grafana: a dashboard of one dialect's signals (the same queries) with the advisor's annotations.")] = "prometheus",
    slo: Annotated[Optional[Path], typer.Option("--slo", help="YAML file of SLOs, as for diagnose: the alerts' thresholds. Default: ADVISOR_SLO_FILE, else built-in defaults.")] = None,
    rules_config: Annotated[Optional[Path], typer.Option("--rules-config", help="YAML of per-rule overrides, as for diagnose (params, thresholds, enabled).")] = None,
    dialect: Annotated[str, typer.Option("--dialect", help="The engine whose metric names the rules read: vllm, sglang, tgi, llamacpp, trtllm, triton, or auto (a group for each).")] = "auto",
    window: Annotated[str, typer.Option("--window", help="The window every recorded signal is computed over (rate and quantiles), as diagnose's --window.")] = "5m",
    for_: Annotated[str, typer.Option("--for", help="How long a breach must hold before its alert fires.")] = "5m",
    warning_for: Annotated[str, typer.Option("--warning-for", help="How long a warning level (near the SLO, the mechanism dominating) must hold.")] = "15m",
    dashboard_url: Annotated[Optional[str], typer.Option("--dashboard-url", help="The advisor dashboard's URL: each alert links to its rule's page there (runbook_url).")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="Only series of this served model (the dialect's model label).")] = None,
    label: Annotated[Optional[list[str]], typer.Option("--label", help="NAME=VALUE added to every alert, e.g. deployment=vllm-llama: the advisor.yaml deployment that Alertmanager's webhook into advisor serve diagnoses. Repeatable.")] = None,
    namespace: Annotated[Optional[str], typer.Option("--namespace", help="The PrometheusRule object's namespace (prometheus-operator format).")] = None,
    out_file: Annotated[Optional[Path], typer.Option("--out", "-o", help="Write the rule file here instead of stdout.")] = None,
) -> None:
    """The rule base as Prometheus recording and alerting rules: a recording rule per signal the rules
    read (the PromQL the advisor evaluates) and an alert per rule's breach and warning level, per
    dialect. Check it with `promtool check rules FILE`."""
    from advisor.app.rules_export import ExportRequest, export
    from advisor.errors import AdvisorError
    from advisor.units import parse_duration

    labels = {}
    for item in label or []:
        k, eq, v = item.partition("=")
        if not eq:
            raise fail(f"--label {item!r}: expected NAME=VALUE")
        labels[k.strip()] = v
    try:
        req = ExportRequest(format=format_, labels=labels, slo=slo, rules_config=rules_config, dialect=dialect,
                            window_s=parse_duration(window), breach_for_s=parse_duration(for_, allow_zero=True),
                            warning_for_s=parse_duration(warning_for, allow_zero=True), dashboard_url=dashboard_url,
                            model=model, namespace=namespace)
        text = export(req)
    except (AdvisorError, ValueError) as e:
        raise fail(str(e)) from None
    if out_file is None:
        sys.stdout.write(text)
        return
    from advisor.reports.documents import write

    try:
        write(out_file, text)
    except OSError as e:
        raise fail(f"cannot write {out_file}: {e.strerror or e}") from None
    err.print(f"[dim]wrote {escape.markup(str(out_file))}[/]", highlight=False)
