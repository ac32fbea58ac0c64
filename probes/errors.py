"""Errors the probes raise. Each carries a one-line message fit for a terminal.

`AdvisorError` is the root of every error the advisor raises on purpose, the probes' included: the
command line turns any of them into one line and exit 2, and anything else into exit 3 (a bug). It
lives here, not in `advisor`, because `probes` imports nothing of `advisor`; `advisor.errors`
re-exports it.
"""


class AdvisorError(Exception):
    """Bad input, an unreachable or misbehaving target, a refused action: the message says which."""


class ProbeError(AdvisorError):
    """A probe could not read its target at all."""


class TargetUnreachable(ProbeError):
    pass


class NotAnEngine(ProbeError):
    """The target answers, but exposes no metrics of a known engine."""


class BadExposition(ProbeError):
    """The target's /metrics text could not be parsed."""


class CatalogError(AdvisorError):
    """A dialect or signal definition file is malformed."""
