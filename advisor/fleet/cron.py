"""Five-field cron expressions (minute hour day-of-month month day-of-week), as crontab(5) reads
them: lists, ranges, steps, names of months and days; when both day fields are restricted, a day
matching either runs. Enough for a weekly report's schedule, without a dependency."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

_MONTHS = {m: i + 1 for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split())}
_DAYS = {d: i for i, d in enumerate("sun mon tue wed thu fri sat".split())}
# (lowest, highest, names) per field; day-of-week 7 is Sunday too.
_FIELDS = [("minute", 0, 59, {}), ("hour", 0, 23, {}), ("day of month", 1, 31, {}),
           ("month", 1, 12, _MONTHS), ("day of week", 0, 7, _DAYS)]
# The furthest a next run is looked for: a date like Feb 30 never comes.
_HORIZON = timedelta(days=366 * 5)


@dataclass(frozen=True)
class Cron:
    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    any_day: bool
    any_weekday: bool

    def matches(self, t: datetime) -> bool:
        return (t.minute in self.minutes and t.hour in self.hours and t.month in self.months
                and self._day_ok(t))

    def next_after(self, t: datetime) -> datetime:
        """The first matching minute strictly after `t` (same time zone as `t`)."""
        t = t.replace(second=0, microsecond=0) + timedelta(minutes=1)
        day = t.replace(hour=0, minute=0)
        end = day + _HORIZON
        while day < end:
            if day.month in self.months and self._day_ok(day):
                for hour in sorted(self.hours):
                    for minute in sorted(self.minutes):
                        at = day.replace(hour=hour, minute=minute)
                        if at >= t:
                            return at
            day += timedelta(days=1)
        raise ValueError(f"cron {self.text!r} never runs")

    def _day_ok(self, t: datetime) -> bool:
        day, weekday = t.day in self.days, (t.isoweekday() % 7) in self.weekdays
        return (day and weekday) if (self.any_day or self.any_weekday) else (day or weekday)


def parse_cron(text: str) -> Cron:
    """A Cron, or ValueError naming the field that is wrong."""
    parts = text.split()
    if len(parts) != 5:
        raise ValueError(f"cron {text!r}: expected 5 fields (minute hour day-of-month month day-of-week), "
                         f"got {len(parts)}")
    sets = [_field(p, *spec) for p, spec in zip(parts, _FIELDS)]
    weekdays = frozenset(0 if d == 7 else d for d in sets[4])
    return Cron(text, *sets[:4], weekdays, parts[2] == "*", parts[4] == "*")


def _field(text: str, name: str, low: int, high: int, names: dict[str, int]) -> frozenset[int]:
    values: set[int] = set()
    for item in text.split(","):
        body, _, step_text = item.partition("/")
        try:
            step = int(step_text) if step_text else 1
        except ValueError:
            raise ValueError(f"cron {name} {item!r}: step {step_text!r} is not a number") from None
        if step < 1:
            raise ValueError(f"cron {name} {item!r}: step must be at least 1")
        if body == "*":
            first, last = low, high
        else:
            first_text, _, last_text = body.partition("-")
            first = _value(first_text, name, low, high, names)
            last = _value(last_text, name, low, high, names) if last_text else (high if step_text else first)
            if last < first:
                raise ValueError(f"cron {name} {item!r}: range runs backwards")
        values.update(range(first, last + 1, step))
    return frozenset(values)


def _value(text: str, name: str, low: int, high: int, names: dict[str, int]) -> int:
    key = text.strip().lower()
    if key in names:
        return names[key]
    try:
        value = int(key)
    except ValueError:
        raise ValueError(f"cron {name}: {text!r} is not a number{' or a name' if names else ''}") from None
    if not low <= value <= high:
        raise ValueError(f"cron {name}: {value} is outside {low}-{high}")
    return value
