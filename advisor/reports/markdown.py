"""Reports rendered from jinja2 templates shipped in templates/."""

from __future__ import annotations

from functools import lru_cache

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from advisor.resources import data_dir


@lru_cache(maxsize=1)
def environment() -> Environment:
    return Environment(loader=FileSystemLoader(data_dir("templates")), undefined=StrictUndefined,
                       trim_blocks=False, lstrip_blocks=False, autoescape=False)


def render(template: str, **context) -> str:
    return environment().get_template(template).render(**context)
