"""The environment of a process the advisor starts (an engine, the demo's Prometheus): built on
purpose, never inherited whole, and the text quoted back from such a process redacted.

An engine has no use for the advisor's settings, and some of them are secrets (its API token, the
credentials of its Prometheus and engine clients): inherited, they would reach the engine's
process, whatever it logs, and the log lines the advisor quotes when a start fails. So every
`ADVISOR_*` variable is removed, and so is any other variable holding the value of one of those
secrets (a `PROM_PASS` the user exported and referred to). What the engine needs beyond the rest
of the environment is the deployment spec's own `env`, which is applied last and kept as given.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from advisor.settings import Settings
from probes.redaction import redact_text
from pydantic import SecretStr
import typing

PREFIX = "ADVISOR_"

def _secret_variables() -> tuple[str, ...]:
    """The Settings fields that are secrets (SecretStr in advisor/settings.py), as environment
    variables: read off the model, so that a new secret setting is covered without a second list."""



    return tuple(f"{PREFIX}{name.upper()}" for name, field in Settings.model_fields.items()
                 if field.annotation is SecretStr or SecretStr in typing.get_args(field.annotation))


SECRET_VARIABLES = _secret_variables()
# The advisor's own PYTHONPATH would shadow an engine venv's pinned packages.
_NOT_PASSED = ("PYTHONPATH",)
# A value this short could be any word of a log line: redacting it would garble the text, and it
# protects nothing (no token or password of a real deployment is three characters).
_SHORTEST_SECRET = 4


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of the advisor's secrets set in the environment, longest first."""
    env = os.environ if environ is None else environ
    values = {env[name] for name in SECRET_VARIABLES if len(env.get(name, "")) >= _SHORTEST_SECRET}
    return sorted(values, key=len, reverse=True)


def for_child(extra: Mapping[str, str] = (), environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment to start a child process with: the current one less the advisor's variables
    and anything holding one of its secrets, then `extra` (the spec's env, a marker) as given."""
    env = os.environ if environ is None else environ
    hidden = set(secret_values(env))
    out = {k: v for k, v in env.items()
           if not k.startswith(PREFIX) and k not in _NOT_PASSED and v not in hidden}
    out.update(dict(extra))
    return out


def redact(text: object) -> str:
    """Text quoted from a child (its log lines): URL credentials and the advisor's secrets shown as
    `***`. Never raises."""

    s = redact_text(text)
    for value in secret_values():
        s = s.replace(value, "***")
    return s


def private_log(path: os.PathLike | str):
    """A new log file only its owner can read (an engine may print its argv, environment or tokens),
    opened for binary writing; its folder is made private too when this creates it."""
    folder = os.path.dirname(os.fspath(path))
    if folder and not os.path.isdir(folder):
        os.makedirs(folder, mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT
    return os.fdopen(fd, "wb")
