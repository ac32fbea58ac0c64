"""Parse a Prometheus text exposition (an engine's /metrics) into flat samples.

A scrape is also checked for what a correct exposition never holds, and each finding is kept in
`Scrape.problems` for the snapshot's notes: the same series twice (the first value is kept), a
histogram whose cumulative buckets go down, whose `_count` differs from its `+Inf` bucket, or that
has no `+Inf` bucket or an unreadable `le`."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from probes.errors import BadExposition

Labels = tuple[tuple[str, str], ...]

# Examples named in one note; the rest are counted.
EXAMPLES = 3
COUNTER_TYPES = ("counter",)
CUMULATIVE_TYPES = ("histogram", "summary")


@dataclass
class Scrape:
    """One reading of /metrics: sample name -> {labels -> value}, taken at monotonic time t.
    types: family name -> its declared TYPE; problems: what the exposition got wrong."""

    t: float
    samples: dict[str, dict[Labels, float]] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def names(self) -> set[str]:
        return set(self.samples)

    def series(self, name: str) -> dict[Labels, float]:
        return self.samples.get(name, {})

    def is_counter(self, name: str) -> bool:
        """Whether a sample only ever goes up while the process lives: a counter, or a histogram's
        or summary's `_bucket`/`_count`/`_sum`. A decrease then means a reset."""
        if name.endswith("_created"):
            return False
        if name.endswith("_total") or self.types.get(name) in COUNTER_TYPES:
            return True
        for suffix in ("_bucket", "_count", "_sum"):
            if name.endswith(suffix) and self.types.get(name[: -len(suffix)]) in CUMULATIVE_TYPES:
                return True
        return False


def series_text(name: str, labels: Labels, limit: int = 60) -> str:
    """A series as Prometheus writes it, each label value cut to `limit` characters."""
    shown = ",".join(f'{k}="{v if len(v) <= limit else v[:limit] + "..."}"' for k, v in labels)
    return f"{name}{{{shown}}}" if labels else name


def listed(items: list[str]) -> str:
    more = len(items) - EXAMPLES
    return ", ".join(items[:EXAMPLES]) + (f" and {more} more" if more > 0 else "")


def parse(text: str, t: float = 0.0) -> Scrape:
    if not isinstance(text, str) or not text.strip():
        raise BadExposition("empty /metrics response")
    if text.lstrip().startswith("<"):
        raise BadExposition("got HTML, not a Prometheus exposition")
    out: dict[str, dict[Labels, float]] = defaultdict(dict)
    types: dict[str, str] = {}
    duplicates: list[str] = []
    try:
        for family in text_string_to_metric_families(text):
            if family.type != "unknown":
                types[family.name] = family.type
            for s in family.samples:
                labels = tuple(sorted(s.labels.items()))
                series = out[s.name]
                if labels in series:
                    duplicates.append(series_text(s.name, labels))
                    continue
                series[labels] = float(s.value)
    except Exception as e:  # noqa: BLE001  (the third-party parser's errors on bad text are bad text)
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise BadExposition(f"malformed exposition: {first[:160]}") from e
    if not out:
        raise BadExposition("exposition holds no samples")
    scrape = Scrape(t=t, samples=dict(out), types=types)
    if duplicates:
        scrape.problems.append(f"/metrics lists the same series more than once ({len(duplicates)} repeats: "
                               f"{listed(sorted(set(duplicates)))}); the first value of each was used")
    scrape.problems += histogram_problems(scrape)
    return scrape


def histogram_problems(scrape: Scrape) -> list[str]:
    """Histograms that contradict themselves within one scrape."""
    found: dict[str, list[str]] = defaultdict(list)
    for name in sorted(scrape.names):
        if not name.endswith("_bucket"):
            continue
        base = name[: -len("_bucket")]
        counts = scrape.series(base + "_count")
        per: dict[Labels, list[tuple[float, float]]] = defaultdict(list)
        for labels, v in scrape.series(name).items():
            lab = dict(labels)
            le = lab.pop("le", None)
            series = tuple(sorted(lab.items()))
            try:
                bound = float(le)
            except (TypeError, ValueError):
                found["buckets without a readable le bound (ignored)"].append(series_text(name, labels))
                continue
            per[series].append((bound, v))
        for series, buckets in per.items():
            buckets.sort()
            shown = series_text(base, series)
            if any(math.isnan(le) for le, _ in buckets):
                found["buckets with a NaN le bound"].append(shown)
                continue
            if not math.isinf(buckets[-1][0]):
                found["no +Inf bucket"].append(shown)
            elif series in counts and not _same(counts[series], buckets[-1][1]):
                found["_count differs from the +Inf bucket"].append(
                    f"{shown} ({counts[series]:g} vs {buckets[-1][1]:g})")
            if any(b[1] < a[1] for a, b in zip(buckets, buckets[1:])):
                found["cumulative bucket counts go down as le grows (repaired as Prometheus does)"].append(shown)
    return [f"inconsistent histogram in /metrics, {what}: {listed(where)}" for what, where in found.items()]


def _same(a: float, b: float) -> bool:
    return a == b or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def _rank_bucket(q: float, buckets: list[tuple[float, float]]) -> tuple[list[tuple[float, float]], int, float] | None:
    """(the repaired cumulative buckets, the index of the one holding q's rank, the rank), as
    Prometheus' histogram_quantile finds them; None when there are no observations."""
    buckets = sorted((le, c) for le, c in buckets if not math.isnan(le))
    if len(buckets) < 2 or not math.isinf(buckets[-1][0]):
        return None
    # Cumulative counts must not decrease; scrapes can race bucket updates.
    fixed, running = [], 0.0
    for le, c in buckets:
        running = max(running, c)
        fixed.append((le, running))
    total = fixed[-1][1]
    if not 0 < total < math.inf or any(math.isnan(c) for _, c in buckets):
        return None
    rank = q * total
    b = next((i for i, (_, c) in enumerate(fixed) if c >= rank), None)
    return None if b is None else (fixed, b, rank)


def bucket_bounds(q: float, buckets: list[tuple[float, float]]) -> tuple[float, float] | None:
    """The finite (lower, upper) bounds of the bucket that bucket_quantile interpolates q in; None
    when there are no observations or the rank falls in the +Inf bucket."""
    found = _rank_bucket(q, buckets)
    if found is None or found[1] == len(found[0]) - 1:
        return None
    fixed, b, _ = found
    return (0.0 if b == 0 else fixed[b - 1][0]), fixed[b][0]


def bucket_quantile(q: float, buckets: list[tuple[float, float]]) -> tuple[float, str | None]:
    """Prometheus' histogram_quantile over cumulative (le, count) pairs.

    Returns (value, note). NaN when there are no observations. When the rank falls in the
    +Inf bucket, returns the highest finite bound, as Prometheus does, with a note saying so.
    """
    found = _rank_bucket(q, buckets)
    if found is None:
        return math.nan, None
    fixed, b, rank = found
    if b == len(fixed) - 1:
        return fixed[-2][0], f"beyond the highest finite bucket ({fixed[-2][0]:g}): a lower bound"
    lo, below = (0.0, 0.0) if b == 0 else fixed[b - 1]
    hi, upto = fixed[b]
    if b == 0 and hi <= 0:
        return hi, None
    inside = upto - below
    return lo + (hi - lo) * ((rank - below) / inside if inside else 1.0), None
