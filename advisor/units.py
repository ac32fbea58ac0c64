"""Parsing durations and times, and formatting values by their unit for people."""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_SCALE = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


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
