"""advisor rules: the rule base and its help pages."""

from __future__ import annotations

from typing import Annotated

import typer

from advisor import escape
from advisor.cli._app import app
from advisor.cli._common import fail, out

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
