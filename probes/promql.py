"""The PromQL behind each signal, for use outside the probe (the exported recording rules).

The same expressions the Prometheus probe shows as a signal's `source` (probes/_promql.py): rate
first, then sum by le; aggregated over every series the dialect's selectors match. Where a metric
has several names (an engine renamed it), each spelling's expression is joined with `or`, so the
rule keeps working across the rename; the probe instead picks the one the target exposes.
"""

from __future__ import annotations

from itertools import product

from probes import _promql
from probes.catalog import Dialect, signals_for

__all__ = ["signal_queries"]


def signal_queries(dialect: Dialect, window_s: float, model: str | None = None) -> dict[str, str]:
    """signal name -> one PromQL expression giving its value over the window, for every signal
    whose operands this dialect maps."""
    out = {}
    for name, sdef in signals_for(dialect).items():
        spellings = product(*(dialect.metrics[o].names for o in sdef.operands()))
        exprs = list(dict.fromkeys(_promql.plan_signal(name, sdef, dialect, list(names), model, window_s).source
                                   for names in spellings))
        out[name] = exprs[0] if len(exprs) == 1 else " or ".join(f"({e})" for e in exprs)
    return out
