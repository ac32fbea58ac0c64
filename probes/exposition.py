"""Parse a Prometheus text exposition (an engine's /metrics) into flat samples.

The text format (0.0.4) is read here, line by line, with regular expressions whose alternatives
never overlap (no backtracking blow-up), so the time is linear in the page: about six times faster
than prometheus_client's parser, which copied the rest of a line once per blank or label, and with
its family and counter rules (a counter `foo` is read as `foo_total`, a `_created` sample is a
family of its own; tests/unit/test_exposition.py compares the two). A page of more than
`max_lines` lines is refused before any line is parsed.

A scrape is also checked for what a correct exposition never holds, and each finding is kept in
`Scrape.problems` for the snapshot's notes: the same series twice (the first value is kept), a
histogram whose cumulative buckets go down, whose `_count` differs from its `+Inf` bucket, or that
has no `+Inf` bucket or an unreadable `le`."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field

from advisor.errors import AdvisorError
from probes.errors import BadExposition

Labels = tuple[tuple[str, str], ...]

# The most lines one page may hold (HttpConfig.max_metrics_lines; ADVISOR_MAX_METRICS_LINES raises it).
MAX_LINES = 200_000

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


def parse(text: str, t: float = 0.0, max_lines: int = MAX_LINES) -> Scrape:
    if not isinstance(text, str) or not text.strip():
        raise BadExposition("empty /metrics response")
    if text.lstrip().startswith("<"):
        raise BadExposition("got HTML, not a Prometheus exposition")
    lines = text.count("\n") + (not text.endswith("\n"))
    if lines > max_lines:
        raise BadExposition(f"/metrics holds {lines:,} lines, more than the cap of {max_lines:,} "
                            "(ADVISOR_MAX_METRICS_LINES raises it)")
    out: dict[str, dict[Labels, float]] = defaultdict(dict)
    types: dict[str, str] = {}
    duplicates: list[str] = []

    def add(name: str, labels: Labels, value: float) -> None:
        series = out[name]
        if labels in series:
            duplicates.append(series_text(name, labels))
        else:
            series[labels] = value

    _read(text, add, types)
    if not out:
        raise BadExposition("exposition holds no samples")
    scrape = Scrape(t=t, samples=dict(out), types=types)
    if duplicates:
        scrape.problems.append(f"/metrics lists the same series more than once ({len(duplicates)} repeats: "
                               f"{listed(sorted(set(duplicates)))}); the first value of each was used")
    scrape.problems += histogram_problems(scrape)
    return scrape


# --- the text format ------------------------------------------------------------------------------

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_WS = "[ \t\n\r\x0b\x0c]"  # what prometheus_client splits comments on (Python's whitespace, ASCII only)
_COMMENT_SPLIT = re.compile(_WS + "+")
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
# A whole sample line in the form engines write, read by one match: name{a="b",c="d"} value [ts].
_PLAIN = re.compile(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*"'
                    r'(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*")*)?,?)\})? ([^\s{]+)(?: ([^\s{]+))?')
_PLAIN_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
# The same, one piece at a time, blanks allowed between the pieces.
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*')
_ESCAPE = re.compile(r'\\[\\n"]')
_INTEGER = re.compile(r"[+-]?\d+")
_ESCAPES = {"\\\\": "\\", "\\n": "\n", '\\"': '"'}
_TYPES = {"counter", "gauge", "summary", "histogram", "gaugehistogram", "unknown", "info", "stateset"}
_SUFFIXES = {"counter": [""], "gauge": [""], "summary": ["_count", "_sum", ""],
             "histogram": ["_count", "_sum", "_bucket"]}


class _Bad(AdvisorError, ValueError):
    pass


def _unescape(v: str) -> str:
    return _ESCAPE.sub(lambda m: _ESCAPES[m.group(0)], v) if "\\" in v else v


def _number(v: str) -> float:
    """As prometheus_client reads a value (int() where it can, else float()), without raising on
    every float: no blanks or underscores; an integer past float's range is refused."""
    if "_" in v or v != v.strip():
        raise _Bad(f"invalid value {v[:40]!r}")
    try:
        x = float(v)
    except ValueError:
        raise _Bad(f"invalid value {v[:40]!r}") from None
    if math.isinf(x) and len(v) <= 4300 and _INTEGER.fullmatch(v):
        raise _Bad(f"value {v[:40]!r} is too large")
    return x


def _value(rest: str) -> float:
    """The value from what follows the name and labels (a timestamp after it is checked, not kept)."""
    rest = rest.lstrip()
    sep = " " if " " in rest else "\t"
    tokens = [v.strip() for v in rest.split(sep) if v.strip()]
    if not tokens:
        raise _Bad("no value")
    value = _number(tokens[0])
    if len(tokens) > 1:
        _number(tokens[-1])
    return value


def _labels(body: str) -> Labels:
    """The sorted labels of a {...} body that _PLAIN matched."""
    if "\\" in body:
        pairs = [(k, _unescape(v)) for k, v in _PLAIN_LABEL.findall(body)]
    else:
        # Without escapes every quote opens or closes a value (the match checked the form):
        # name=, value, ,name=, value, ... between them.
        parts = body.split('"')
        pairs = list(zip([k.lstrip(",")[:-1] for k in parts[0:-1:2]], parts[1::2]))
    labels = dict(pairs)
    if len(labels) != len(pairs):
        raise _Bad("a label twice")
    if "__" in body and any(k.startswith("__") for k in labels):
        raise _Bad("a reserved label name (__...)")
    return tuple(sorted(labels.items()))


def _sample(line: str, seen: dict[str, Labels]) -> tuple[str, Labels, float]:
    """(name, sorted labels, value) of one sample line. seen: label bodies already read in this
    page (the same {engine="0",le="0.1"} recurs in every histogram), read once each."""
    m = _PLAIN.fullmatch(line)
    if m is not None:
        name, body, value, stamp = m.groups()
        if not body:
            labels: Labels = ()
        else:
            labels = seen.get(body)
            if labels is None:
                labels = seen[body] = _labels(body)
        number = _number(value)
        if stamp is not None:
            _number(stamp)
        return name, labels, number
    # Blanks between the pieces, tabs, a timestamp after more blanks: read piece by piece.
    m = _NAME.match(line)
    if m is None:
        raise _Bad("no metric name")
    name, pos = m.group(), m.end()
    brace = pos
    while brace < len(line) and line[brace].isspace():
        brace += 1
    pieces: dict[str, str] = {}
    if brace < len(line) and line[brace] == "{":
        pos = brace + 1
        while True:
            while pos < len(line) and line[pos].isspace():
                pos += 1
            if pos < len(line) and line[pos] == "}":
                pos += 1
                break
            lm = _LABEL.match(line, pos)
            if lm is None:
                raise _Bad("invalid labels")
            k, v = lm.groups()
            if k in pieces:
                raise _Bad(f"label {k} twice")
            if k.startswith("__"):
                raise _Bad(f"reserved label name {k}")
            pieces[k] = _unescape(v)
            pos = lm.end()
            if pos < len(line) and line[pos] == ",":
                pos += 1
            elif not (pos < len(line) and line[pos] == "}"):
                raise _Bad("invalid labels")
    elif pos == len(line) or line[pos] not in " \t":
        raise _Bad("no blank after the metric name")
    return name, tuple(sorted(pieces.items())), _value(line[pos:])


def _comment(line: str) -> list[str]:
    """The line split as prometheus_client splits a comment: '#', keyword, name, the rest; a quoted
    name (TYPE "a.b" counter) keeps its blanks and quotes, and ends at its closing quote."""
    parts = _COMMENT_SPLIT.split(line, 3)
    if len(parts) > 2 and parts[1] in ("TYPE", "HELP") and parts[2].startswith('"'):
        pos = len(parts[0])
        pos = _COMMENT_SPLIT.match(line, pos).end() + len(parts[1])
        pos = _COMMENT_SPLIT.match(line, pos).end()
        q = _QUOTED.match(line, pos)
        if q is None:
            raise _Bad("missing close quote")
        tail = line[q.end():]
        if tail and tail[0] not in " \t\n\r\x0b\x0c":
            raise _Bad("missing close quote")
        tail = tail.lstrip(" \t\n\r\x0b\x0c")
        return [parts[0], parts[1], q.group()] + ([tail] if tail else [])
    return parts


def _family_name(name: str, typ: str) -> str:
    return name[:-6] if typ == "counter" and name.endswith("_total") else name


def _read(text: str, add, types: dict[str, str]) -> None:
    """Every sample of the text into add(name, labels, value), and each family's declared type into
    types, by prometheus_client's rules: a TYPE or HELP line starts a family, whose samples are the
    names its type allows (histogram: _bucket, _count, _sum); any other sample is a family of its
    own; a counter's samples are named ..._total."""
    name, typ, allowed, pending = "", "untyped", [], []

    def close() -> None:
        """The current family is complete: its type recorded, its samples added."""
        if typ == "untyped":
            kind = "unknown"
        elif typ not in _TYPES:
            raise _Bad(f"invalid metric type {typ[:40]!r}")
        else:
            kind = typ
        if kind != "unknown":
            types[_family_name(name, kind)] = kind
        rename = kind == "counter" and not name.endswith("_total")
        for sname, labels, value in pending:
            add(sname + "_total" if rename else sname, labels, value)

    n = 0
    seen: dict[str, Labels] = {}
    try:
        for n, raw in enumerate(text.split("\n"), 1):
            line = raw.strip()
            if not line:
                continue
            if line[0] == "#":
                parts = _comment(line)
                if len(parts) < 2:
                    continue
                candidate = ""
                if len(parts) > 2:
                    if parts[1] not in ("TYPE", "HELP"):
                        continue
                    candidate = parts[2]
                    if candidate.startswith('"') and candidate.endswith('"') and len(candidate) > 1:
                        candidate = _unescape(candidate[1:-1])
                    elif not _NAME.fullmatch(candidate):
                        raise _Bad("invalid metric name")
                if parts[1] == "HELP":
                    if candidate != name:
                        if name:
                            close()
                        name, typ, pending, allowed = candidate, "untyped", [], [candidate]
                elif parts[1] == "TYPE":
                    if len(parts) < 4:
                        raise _Bad("TYPE without a type")
                    if candidate != name:
                        if name:
                            close()
                        name, pending = candidate, []
                    typ = parts[3]
                    allowed = [name + suffix for suffix in _SUFFIXES.get(typ, [""])]
                continue
            sname, labels, value = _sample(line, seen)
            if sname in allowed:
                pending.append((sname, labels, value))
                continue
            if name:
                close()
            name, typ, pending, allowed = "", "untyped", [], []
            add(sname, labels, value)  # a family of its own, untyped
        if name:
            close()
    except _Bad as e:
        shown = raw.strip()
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise BadExposition(f"malformed exposition: line {n}: {e}: {shown!r}") from None


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
