"""The verdict vocabulary every layer shares, the key an experiment's result is found by, and how a
ratio and its interval read in words.

Low in the package on purpose: a diagnosis check refers to the experiment that tested it by key
and verdict (advisor/diagnosis/model.py), and the cost line and the experiment's progress lines
format an interval, without any of them importing the experiments or the reports.
"""

from __future__ import annotations

from typing import Literal, NewType, get_args

Verdict = Literal["improved", "regressed", "no change", "inconclusive"]
VERDICTS: tuple[Verdict, ...] = get_args(Verdict)

# An experiment's own id (exp-...): its ExperimentResult.id, the store's experiments.key.
ExperimentKey = NewType("ExperimentKey", str)


def ratio_text(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}"


def interval_text(ci: tuple[float, float] | None) -> str:
    """Two decimals where they mean something; an early look's interval of a tail readout can span
    1e-5 to 1e14, shown in two significant digits rather than as "0.00" or fifteen digits."""
    def end(v: float) -> str:
        return f"{v:.2f}" if v == 0 or 0.01 <= abs(v) < 1000 else f"{v:.2g}"

    return "-" if not ci else f"[{end(ci[0])}, {end(ci[1])}]"


def level_text(level: float | None) -> str:
    """A confidence level as a percentage; 95 % where none is known."""
    return f"{100 * level:.3g} %" if level else "95 %"
