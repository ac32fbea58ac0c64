"""The `advisor` command. Results go to stdout; logs and progress to stderr.

One module per command; importing them registers them on the app.
"""

from advisor.cli import diagnose, experiment, load, probe, rules  # noqa: F401  (registration)
from advisor.cli._app import app


def main() -> None:
    app()


__all__ = ["app", "main"]
