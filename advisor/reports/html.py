"""HTML reports and dashboard pages from the jinja2 templates in templates/html/.

Autoescaped: every `{{ value }}` is HTML-escaped, so a model name, label or rule text holding
markup shows as text. The only values marked safe are the advisor's own SVG charts (Markup from
advisor/reports/charts.py). Pages are self-contained: styles inline, charts inline, no scripts or
fonts fetched from anywhere.
"""

from __future__ import annotations

from functools import lru_cache

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from advisor.resources import data_dir


@lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(loader=FileSystemLoader(data_dir("templates") / "html"), undefined=StrictUndefined,
                      autoescape=select_autoescape(default=True, default_for_string=True), trim_blocks=True,
                      lstrip_blocks=True)
    return env


def render(template: str, **context) -> str:
    context.setdefault("dashboard", False)
    context.setdefault("actions", False)
    return environment().get_template(template).render(**context)
