"""Errors the probes raise. Each carries a one-line message fit for a terminal.

They derive from `advisor.errors.AdvisorError`, the root of every error raised on purpose: the
command line turns any of them into one line and exit 2, and anything else into exit 3 (a bug).
`advisor.errors` is the one module of `advisor` that `probes` imports (ARCHITECTURE.md).
"""

from advisor.errors import AdvisorError


class ProbeError(AdvisorError):
    """A probe could not read its target at all."""


class TargetUnreachable(ProbeError):
    pass


class NotAnEngine(ProbeError):
    """The target answers, but exposes no metrics of a known engine."""


class BadExposition(ProbeError):
    """The target's /metrics text could not be parsed."""


class DialectError(AdvisorError):
    """A dialect or signal definition file (probes/dialects/, signals.yaml) is malformed."""
