"""Parse a Prometheus text exposition (an engine's /metrics) into flat samples."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from probes.errors import BadExposition

Labels = tuple[tuple[str, str], ...]


@dataclass
class Scrape:
    """One reading of /metrics: sample name -> {labels -> value}, taken at monotonic time t."""

    t: float
    samples: dict[str, dict[Labels, float]] = field(default_factory=dict)

    @property
    def names(self) -> set[str]:
        return set(self.samples)

    def series(self, name: str) -> dict[Labels, float]:
        return self.samples.get(name, {})


def parse(text: str, t: float = 0.0) -> Scrape:
    if not text.strip():
        raise BadExposition("empty /metrics response")
    if text.lstrip().startswith("<"):
        raise BadExposition("got HTML, not a Prometheus exposition")
    out: dict[str, dict[Labels, float]] = defaultdict(dict)
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out[s.name][tuple(sorted(s.labels.items()))] = float(s.value)
    except (ValueError, TypeError, IndexError, KeyError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise BadExposition(f"malformed exposition: {first[:160]}") from e
    if not out:
        raise BadExposition("exposition holds no samples")
    return Scrape(t=t, samples=dict(out))


def bucket_quantile(q: float, buckets: list[tuple[float, float]]) -> tuple[float, str | None]:
    """Prometheus' histogram_quantile over cumulative (le, count) pairs.

    Returns (value, note). NaN when there are no observations. When the rank falls in the
    +Inf bucket, returns the highest finite bound, as Prometheus does, with a note saying so.
    """
    buckets = sorted(buckets)
    if len(buckets) < 2 or not math.isinf(buckets[-1][0]):
        return math.nan, None
    # Cumulative counts must not decrease; scrapes can race bucket updates.
    fixed, running = [], 0.0
    for le, c in buckets:
        running = max(running, c)
        fixed.append((le, running))
    total = fixed[-1][1]
    if total <= 0:
        return math.nan, None
    rank = q * total
    b = next(i for i, (_, c) in enumerate(fixed) if c >= rank)
    if b == len(fixed) - 1:
        return fixed[-2][0], f"beyond the highest finite bucket ({fixed[-2][0]:g}): a lower bound"
    lo, below = (0.0, 0.0) if b == 0 else fixed[b - 1]
    hi, upto = fixed[b]
    if b == 0 and hi <= 0:
        return hi, None
    inside = upto - below
    return lo + (hi - lo) * ((rank - below) / inside if inside else 1.0), None
