"""One error root for the whole advisor (httpx style): every error raised on purpose derives from
`AdvisorError`, so the command line can tell bad input or a bad target (one line, exit 2) from a
bug (exit 3, traceback with --debug)."""

from probes.errors import AdvisorError, BadExposition, CatalogError, NotAnEngine, ProbeError, TargetUnreachable


class Interrupted(AdvisorError):
    """SIGINT or SIGTERM, or the command's budget ran out."""


class BudgetExceeded(Interrupted):
    pass


__all__ = ["AdvisorError", "BadExposition", "BudgetExceeded", "CatalogError", "Interrupted", "NotAnEngine",
           "ProbeError", "TargetUnreachable"]
