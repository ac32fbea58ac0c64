"""The `advisor` Typer application and its global options."""

from __future__ import annotations

import logging
import os
import sys
from typing import Annotated

import typer

from advisor.settings import get_settings

app = typer.Typer(
    help="LLM serving advisor: reads a deployment's live metrics, recognises the symptom, ranks the checks "
    "from the optimisation map, and proves them with A/B experiments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


_debug = False


def debug_enabled() -> bool:
    return _debug or os.environ.get("ADVISOR_DEBUG", "") not in ("", "0", "false")


@app.callback()
def _setup(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log debug detail to stderr.")] = False,
           debug: Annotated[bool, typer.Option("--debug", help="Show the traceback of an internal error (exit 3) instead of one line.")] = False) -> None:
    global _debug
    _debug = debug
    level = logging.DEBUG if verbose else getattr(logging, get_settings().log_level.upper(), logging.WARNING)
    logging.basicConfig(level=level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
