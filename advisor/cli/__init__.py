"""The `advisor` command. Results go to stdout; logs and progress to stderr.

One module per command; importing them registers them on the app. `main` is the only place that
turns what escapes a command into an exit code: the advisor's own errors are one line and exit 2,
an interrupt is one line and 130 (SIGINT) or 143 (SIGTERM), a budget that ran out is exit 2, and
anything else is a bug: one line, exit 3, and the traceback only with --debug.
"""

import os
import sys

import typer

try:  # typer vendors click from 0.2x on; its usage errors are its own classes
    from typer._click import exceptions as _usage
except ImportError:  # pragma: no cover
    from click import exceptions as _usage

from advisor import interrupts
from advisor.cli import capacity, deployment, diagnose, experiment, load, model, probe, report, rules, serve  # noqa: F401  (registration)
from advisor.cli._app import app, debug_enabled
from advisor.cli._common import EXIT_FAILED, EXIT_INTERNAL, err
from advisor.errors import AdvisorError
from advisor.escape import one_line, plain
from probes.redaction import redact_text

EXIT_INTERRUPTED = {"SIGINT": 130, "SIGTERM": 143}


def _line(message: str) -> None:
    # A URL's credentials never reach the terminal, whatever put them in the message.
    err.print(plain(redact_text(message)), markup=False, highlight=False, soft_wrap=True)


def _finish(code: int) -> None:
    # Worker threads still blocked on a socket would be joined at exit; nothing of ours is
    # half-written here (stores commit or roll back, journals are fsynced per line).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main() -> None:
    interrupts.install(_line)
    try:
        # Not standalone: a usage error comes here and is said in one line like any other bad input;
        # typer.Exit(n) and an interrupt (130) come back as the return value.
        rv = app(standalone_mode=False)
        code = rv if isinstance(rv, int) else 0
    except _usage.NoArgsIsHelpError as e:
        e.show()
        code = e.exit_code
    except _usage.UsageError as e:
        path = e.ctx.command_path if e.ctx is not None else "advisor"
        _line(f"error: {one_line(e.format_message(), 2000)} (see '{path} --help')")
        code = e.exit_code
    except _usage.ClickException as e:
        _line(f"error: {one_line(e.format_message(), 2000)}")
        code = e.exit_code
    except typer.Abort:
        code = 130
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_FAILED)
    except KeyboardInterrupt:
        code = 130
    except AdvisorError as e:
        if debug_enabled():
            raise
        _line(f"error: {one_line(e, 2000)}")
        code = EXIT_FAILED
    except Exception as e:  # noqa: BLE001  (the last line of defence: a bug, said as one)
        if debug_enabled():
            raise
        _line(f"internal error: {type(e).__name__}: {one_line(e)} "
              "(a bug in the advisor; rerun with --debug for the traceback)")
        code = EXIT_INTERNAL
    signalled = interrupts.received()
    if interrupts.budget_hit():
        _finish(EXIT_FAILED)
    if signalled:
        # An experiment exits 1 after restoring its baseline: that code stands.
        _finish(code if code not in (0, 130) else EXIT_INTERRUPTED.get(signalled, 130))
    sys.exit(code)


__all__ = ["app", "main"]
