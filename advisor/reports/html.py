"""HTML reports and dashboard pages from the jinja2 templates in templates/html/.

Autoescaped: every `{{ value }}` is HTML-escaped, so a model name, label or rule text holding
markup shows as text, and first passed through escape.plain, so a control character (an ESC from
a target's /metrics) shows as a visible escape (\\x1b) and no raw control byte reaches the page.
The only values marked safe are the advisor's own SVG charts (Markup from
advisor/reports/charts.py, whose labels are made plain there). Pages are self-contained: styles
inline, charts inline, no scripts or fonts fetched from anywhere.
"""

from __future__ import annotations

from contextvars import ContextVar
from functools import lru_cache

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from advisor.escape import plain
from advisor.reports.views import experiment_title
from advisor.resources import data_dir

# The nonce the dashboard's Content-Security-Policy allows scripts with, for the response being
# rendered (set per request by advisor/web/middleware.py; a report written by the CLI has none,
# and no script either).
SCRIPT_NONCE: ContextVar[str | None] = ContextVar("script_nonce", default=None)


def _finalize(value: object) -> object:
    # Markup is the advisor's own (charts, tojson's escaped JSON): already safe, and plain would
    # only mangle it. Everything else is text to show.
    return value if isinstance(value, Markup) else plain(value)


@lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(loader=FileSystemLoader(data_dir("templates") / "html"), undefined=StrictUndefined,
                      autoescape=select_autoescape(default=True, default_for_string=True), trim_blocks=True,
                      lstrip_blocks=True, finalize=_finalize)
    env.globals["experiment_title"] = experiment_title  # a store listing's row, titled as its page is
    return env


def render(template: str, **context) -> str:
    context.setdefault("dashboard", False)
    context.setdefault("actions", False)
    context.setdefault("nonce", SCRIPT_NONCE.get() or "")
    return environment().get_template(template).render(**context)
