"""Parsing durations and times, and formatting values by their unit for people."""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_SCALE = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


# Ceilings on what one command is asked to do, checked before anything is sampled or planned: past
# them a typo (99999d, 1e308) would sample for centuries or build a schedule larger than memory.
# advisor/ranges.py holds input files to looser ranges (a year, a million per second) that no value
# may pass anywhere; these are what the probe and the load generator themselves take on.
DAY_S = 86_400.0
# probe/diagnose --url sample the engine's /metrics for the whole window (the command runs that long):
# a day; a longer look is Prometheus' job.
MAX_SAMPLE_WINDOW_S = DAY_S
# A Prometheus window is one range in a query, not time spent: a year, past any retention (15 days
# by default); a longer range only makes Prometheus read every sample it holds.
MAX_LOOKBACK_S = 366 * DAY_S
# One load run: a day (a longer soak is several runs, each with its own summary).
MAX_LOAD_DURATION_S = DAY_S
# Requests per second one load sends: one core holds about 670 (benchmarks/README.md), so 10,000 is
# fifteen --workers' worth, and more than a deployment of LLM engines serves (at 200 tokens an answer,
# two million tokens a second).
MAX_LOAD_RATE = 10_000.0
# Requests one load plans: each keeps its prompt text (kilobytes) and its record until the run ends,
# so a million is a few GB at most (rate x duration: 10,000/s for 100 s, or 11.6/s for a day).
MAX_LOAD_REQUESTS = 1_000_000
# Closed-loop slots: one coroutine and one connection each.
MAX_CONCURRENCY = 10_000
# An experiment's max_duration guardrail: a week (the whole design, both arms' blocks, past it is
# aborted; a real one takes minutes to hours).
MAX_EXPERIMENT_S = 7 * DAY_S
# A weekly report reads Prometheus once per hour of its period (and once per day, twice): a month is
# 744 probes; a year would be 8,784.
MAX_REPORT_PERIOD_S = 31 * DAY_S


def duration_text(seconds: float) -> str:
    """86400 -> '24h', 31536000 -> '365d', 90 -> '90s': how a ceiling is named in a message."""
    for size, unit in ((DAY_S, "d"), (3600, "h"), (60, "m")):
        if seconds >= size and seconds % size == 0 and not (unit == "d" and seconds <= 2 * DAY_S):
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def check_ceiling(value: float, ceiling: float, what: str, why: str, duration: bool = True) -> float:
    """value, or ValueError in one line: '<what> <value> is above the ceiling of <ceiling> (<why>)'."""
    if value > ceiling:
        if duration:
            shown = duration_text(value) if value < 1e12 else f"{value:g}s"
        else:
            shown = f"{int(value):,}" if value < 1e15 and float(value).is_integer() else f"{value:.6g}"
        limit = duration_text(ceiling) if duration else f"{ceiling:,.0f}"
        raise ValueError(f"{what} {shown} is above the ceiling of {limit} ({why})")
    return value


def parse_duration(text: str, allow_zero: bool = False) -> float:
    """'60s', '5m', '1.5h', '90' (seconds) -> seconds: finite, above zero (or zero, where allowed)."""
    m = _DURATION.match(text)
    value = float(m.group(1)) * _SCALE[m.group(2)] if m else math.nan
    if not (math.isfinite(value) and (value > 0 or (allow_zero and value == 0))):
        raise ValueError(f"not a duration: {text!r} (use e.g. 30s, 5m, 1h)")
    return value


def parse_time(text: str) -> datetime:
    """An RFC 3339 time or unix seconds -> aware datetime."""
    try:
        return datetime.fromtimestamp(float(text), tz=timezone.utc)
    except (ValueError, OverflowError, OSError):  # not a number, NaN, or past the calendar
        pass
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as e:
        raise ValueError(f"not a time: {text!r} (use RFC 3339 or unix seconds)") from e
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value * 1000:.1f} ms" if abs(value) < 1 else f"{value:.3f} s"
    if unit == "ratio":
        return f"{value * 100:.1f} %"
    if unit == "percent":
        return f"{value:.1f} %"
    if unit == "bytes":
        for size, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
            if abs(value) >= size:
                return f"{value / size:.3g} {name}"
        return f"{value:.0f} bytes"
    if abs(value) >= 100 or value == int(value):
        return f"{value:,.0f} {unit}"
    return f"{value:.3g} {unit}"
