"""The `advisor` Typer application and its global options."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

try:  # typer vendors click from 0.2x on (as in cli/__init__.py)
    from typer import _click
except ImportError:  # pragma: no cover
    import click as _click

from advisor import escape


class _Group(TyperGroup):
    """Notes in the context whether the command line asks for a command's help, read with the
    command's own parser (so `--slo --help` is an --slo path, as click reads it), before the
    callback below runs: help then needs no settings and no TLS check, so it shows under a broken
    environment and costs about 40 ms less (the settings' import and their pydantic plugins)."""

    def resolve_command(self, ctx: _click.Context, args: list[str]):
        resolved = super().resolve_command(ctx, args)
        name, cmd, rest = resolved
        probe = ctx
        while cmd is not None:  # down sub-groups (`advisor report diagnosis --help`) to the command
            probe = _click.Context(cmd, parent=probe, info_name=name, resilient_parsing=True)
            opts, left, _ = cmd.make_parser(probe).parse_args(list(rest))
            group = isinstance(cmd, TyperGroup)
            if opts.get("help") or (group and not left and cmd.no_args_is_help):
                ctx.meta["advisor.help"] = True
            if not group or not left:
                break
            name, cmd, rest = cmd.resolve_command(probe, left)
        return resolved


app = typer.Typer(
    cls=_Group,
    help="LLM serving advisor: reads a deployment's live metrics, recognises the symptom, ranks the checks "
    "from the optimisation map, and proves them with A/B experiments.\n\n"
    "TLS certificates are verified (opt out with --insecure or ADVISOR_TLS_VERIFY=false; trust other CAs with "
    "--ca-bundle or ADVISOR_CA_BUNDLE). Credentials: user:password@ in a URL (never printed or stored), or "
    "ADVISOR_PROM_USER with ADVISOR_PROM_PASSWORD or ADVISOR_PROM_PASSWORD_FILE, or ADVISOR_PROM_TOKEN or "
    "ADVISOR_PROM_TOKEN_FILE (bearer), and the same with ADVISOR_ENGINE_ for engines.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


_debug = False


def debug_enabled() -> bool:
    return _debug or os.environ.get("ADVISOR_DEBUG", "") not in ("", "0", "false")


@app.callback()
def _setup(ctx: typer.Context,
           verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log debug detail to stderr.")] = False,
           debug: Annotated[bool, typer.Option("--debug", help="Show the traceback of an internal error (exit 3) instead of one line.")] = False,
           insecure: Annotated[bool, typer.Option("--insecure", help="Do not verify TLS certificates (Prometheus, engines, the load generator); warns on every run. Same as ADVISOR_TLS_VERIFY=false.")] = False,
           ca_bundle: Annotated[Optional[Path], typer.Option("--ca-bundle", help="PEM file (or hashed directory) of the CAs to trust instead of the default store. Default: ADVISOR_CA_BUNDLE.")] = None,
           ) -> None:
    if ctx.meta.get("advisor.help"):
        return
    # Here, not at the top: pydantic-settings and the settings' model cost about 40 ms (python -X
    # importtime, 2-core host), which a command's --help does not need.
    from advisor.settings import get_settings

    global _debug
    _debug = debug
    level = logging.DEBUG if verbose else getattr(logging, get_settings().log_level.upper(), logging.WARNING)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(escape.PlainFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])
    from advisor import net

    net.set_tls_options(insecure=insecure, ca_bundle=ca_bundle)
    warning = net.insecure_warning()
    if warning:
        sys.stderr.write(warning + "\n")
        sys.stderr.flush()
    net.check_tls()
