"""The one error root (httpx style): every error the advisor and its probes raise on purpose derives
from `AdvisorError`, so the command line can tell bad input or a bad target (one line, exit 2) from a
bug (exit 3, traceback with --debug).

This module is the bottom of the import layers (ARCHITECTURE.md): it imports nothing, and it is the
one module of `advisor` that `probes` imports. Each package's own errors live beside its code
(`probes.errors`, `advisor.store.errors`, ...) and derive from this root.
"""


class AdvisorError(Exception):
    """Bad input, an unreachable or misbehaving target, a refused action: the message says which."""


class Interrupted(AdvisorError):
    """SIGINT or SIGTERM, or the command's budget ran out."""


class BudgetExceeded(Interrupted):
    pass


__all__ = ["AdvisorError", "BudgetExceeded", "Interrupted"]
