"""Reports rendered from jinja2 templates shipped in templates/.

Every `{{ value }}` in a markdown template is escaped (advisor.escape.markdown): model names, labels,
engine versions, error messages, URLs and override values come from a target, a file or the user,
and must show as text, never as markdown or HTML. Line breaks inside a value are folded to spaces so
that a value cannot start a heading, a list or a table row of its own. Two ways out, both explicit:
`|code` puts a value in a code span (or, where a code span cannot hold it, escapes it as text), and
`|safe` marks a fragment the advisor wrote itself as markdown to keep as it is. Never `|safe` a
value that holds anything from outside.
"""

from __future__ import annotations

import re
from functools import lru_cache

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from advisor import escape
from advisor.resources import data_dir

# What a one-line code span can hold as it is: no backtick, pipe (a table cell), markup or control.
_CODE_SAFE = re.compile(r"[^`|<>&\\\x00-\x1f\x7f-\x9f]+")


def _finalize(value: object) -> str:
    if isinstance(value, Markup):
        return str(value)
    return escape.markdown(" ".join(escape.plain(value).split()) if value is not None else "None")


def code(value: object) -> Markup:
    """A code span for an identifier-like value (a mechanism, a model name, a PromQL selector);
    escaped plain text where a code span would not show it literally."""
    text = "" if value is None else str(value)
    if _CODE_SAFE.fullmatch(text) and text.strip() == text:
        return Markup(f"`{text}`")
    return Markup(_finalize(text))


@lru_cache(maxsize=1)
def environment() -> Environment:
    # autoescape off: HTML escaping is the wrong escaping for markdown (it leaves `*`, `_`, `#`
    # and links live); finalize applies escape.markdown to every interpolated value instead.
    env = Environment(loader=FileSystemLoader(data_dir("templates")), undefined=StrictUndefined,
                      trim_blocks=False, lstrip_blocks=False, autoescape=False, finalize=_finalize)
    env.filters["code"] = code
    return env


def render(template: str, **context) -> str:
    return environment().get_template(template).render(**context)


def diagnosis(d, results=(), **view) -> str:
    """A diagnosis as markdown, from the same view as the HTML report (no charts in markdown);
    `results`: the experiments its checks ran, as run."""
    from advisor.reports.views import diagnosis_view, experiment_views

    return render("diagnosis.md.j2", v=diagnosis_view(d, experiments=experiment_views(results, charts_on=False),
                                                      charts_on=False, **view))


def experiment(view) -> str:
    """An experiment as markdown, from the view the HTML report and the terminal use."""
    return render("experiment.md.j2", x=view)
