"""A deployment's capacity at the SLO over time, as the dashboard and the weekly report show it:
the latest answer of a period beside the latest of the period before, and whether they differ.

Two answers differ only where their intervals do not overlap: each interval holds its capacity at
its level (95 %), so disjoint intervals are a change the searches saw, and overlapping ones are
not told apart, whatever their estimates say."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from advisor.capacity.result import interval_text

if TYPE_CHECKING:  # the store package loads sqlalchemy and alembic: not for `advisor capacity` without --save
    from advisor.store import CapacitySummary


@dataclass(frozen=True)
class CapacityTrend:
    latest: str  # "5.1 requests/s, 95 % interval [4.6, 5.6], 2026-12-05 (capacity run 12)", or why there is none
    before: str  # the same for the period before, or "-"
    change: str  # "+21 %: the intervals are apart", "no change shown: the intervals overlap", "-"
    changed: bool  # the intervals are apart
    latest_id: int | None = None


def figure(a: CapacitySummary) -> str:
    """The answer as a number with its interval, in one phrase (a stored summary: no trials at hand)."""
    if a.status == "zero":
        return "0 requests/s (the SLO broke at the lowest rate tried)"
    if a.status == "at least":
        return f"at least {a.low:.3g} requests/s (every SLO held at the rate ceiling)"
    if a.low is None and a.high is None:
        return "no answer (the search decided no trial)"
    return ("partial: " if a.status == "partial" else "") + interval_text(a.low, a.high, a.estimate, a.level)


def _stamp(a: CapacitySummary) -> str:
    return f"{figure(a)}, {a.created_at:%Y-%m-%d} (capacity run {a.id})"


def _middle(a: CapacitySummary) -> float | None:
    if a.estimate is not None:
        return a.estimate
    return a.low if a.status == "at least" else None


def trend(latest: CapacitySummary | None, before: CapacitySummary | None) -> CapacityTrend:
    if latest is None:
        return CapacityTrend("not measured this period", _stamp(before) if before else "-", "-", False)
    if before is None:
        return CapacityTrend(_stamp(latest), "-", "no run the period before", False, latest.id)
    now_mid, then_mid = _middle(latest), _middle(before)
    pct = (f"{100 * (now_mid / then_mid - 1):+.0f} %" if now_mid is not None and then_mid else "a change")
    # An open end (None) reaches as far as it can: 0 below, no limit above.
    now_lo, now_hi = latest.low or 0.0, latest.high if latest.high is not None else float("inf")
    then_lo, then_hi = before.low or 0.0, before.high if before.high is not None else float("inf")
    apart = now_lo > then_hi or then_lo > now_hi
    if apart:
        change = f"{pct}: the intervals are apart ({'up' if now_lo > then_hi else 'down'})"
    else:
        change = f"no change shown: the intervals overlap (estimates {pct})" if pct != "a change" else \
            "no change shown: the intervals overlap"
    return CapacityTrend(_stamp(latest), _stamp(before), change, apart, latest.id)
