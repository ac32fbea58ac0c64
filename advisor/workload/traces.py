"""Request traces: our JSONL, Mooncake's JSONL and Azure's LLM inference CSV, read into one Trace.

A Trace is replayed exactly (`trace_requests`) or summarised into a Workload (`trace_to_workload`).

Formats (checked against the publishers' own files and docs):
- ours, JSONL: {"timestamp": seconds (number) or ISO-8601 string, "prompt_tokens": int,
  "output_tokens": int, "prefix_id": optional str or int, "prefix_tokens": optional int}
- Mooncake (kvcache-ai/Mooncake FAST25-release/traces), JSONL: {"timestamp": milliseconds since
  the first request, "input_length": int, "output_length": int, "hash_ids": [int, ...]}; each hash
  id names one 512-token block, and requests that start with the same ids share that prefix.
- Azure LLM inference traces 2023 and 2024 (Azure/AzurePublicDataset), CSV with the header
  TIMESTAMP,ContextTokens,GeneratedTokens; 2023 writes "2023-11-16 18:17:03.9799600" (naive,
  7 fractional digits), 2024 "2024-05-10 00:00:00.009930+00:00".
"""

from __future__ import annotations

import csv
import json
import math
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator, Literal

from advisor.errors import AdvisorError
from advisor.inputs import text_lines
from advisor.workload.plan import PlannedRequest
from advisor.workload.spec import Arrival, Bucket, Prefix, Workload, WorkloadError
from advisor.ranges import RATE_MAX

Format = Literal["jsonl", "mooncake", "azure"]
MOONCAKE_BLOCK_TOKENS = 512
AZURE_HEADER = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
# Below this many inter-arrival gaps a CV says little, so arrivals default to Poisson.
MIN_GAPS_FOR_BURSTINESS = 20
# Sanity bounds on one record: more tokens than any context window, or a time past the year 9999
# in seconds (a number of milliseconds given as seconds lands here), is a wrong column, not a request.
MAX_TOKENS = 100_000_000
MAX_SECONDS = 1e12


@dataclass(frozen=True)
class TraceRecord:
    at_s: float  # seconds after the trace's first request
    prompt_tokens: int
    output_tokens: int
    prefix_id: str | None = None
    prefix_tokens: int | None = None  # length of the shared prefix, where the format says it
    line: int = 0


@dataclass
class Trace:
    path: Path
    format: Format
    records: list[TraceRecord]
    out_of_order: int = 0  # records that came earlier than a record above them; sorted on load
    notes: list[str] = field(default_factory=list)

    @property
    def duration_s(self) -> float:
        return self.records[-1].at_s

    def prefix_groups(self) -> dict[str, int]:
        """prefix id -> group number, in order of first appearance."""
        groups: dict[str, int] = {}
        for r in self.records:
            if r.prefix_id is not None and r.prefix_id not in groups:
                groups[r.prefix_id] = len(groups)
        return groups

    def prefix_lengths(self) -> dict[int, int]:
        """group number -> shared prefix length in tokens (the group's median where lengths vary).

        Falls back to half the group's shortest prompt where the trace gives no length. A prompt
        shorter than its group's prefix carries only as much of it as fits (prompts_for cuts it)."""
        groups = self.prefix_groups()
        lengths: dict[int, list[int]] = {}
        shortest: dict[int, int] = {}
        for r in self.records:
            if r.prefix_id is None:
                continue
            g = groups[r.prefix_id]
            shortest[g] = min(shortest.get(g, r.prompt_tokens), r.prompt_tokens)
            if r.prefix_tokens:
                lengths.setdefault(g, []).append(r.prefix_tokens)
        out = {}
        for g, short in shortest.items():
            out[g] = max(1, int(statistics.median(lengths[g])) if g in lengths else short // 2)
        return out


class _Bad(AdvisorError):
    """One field of one line is wrong; turned into a WorkloadError with file and line."""

    def __init__(self, field_name: str, why: str):
        self.field, self.why = field_name, why


def _positive_int(row: dict, key: str) -> int:
    if key not in row or row[key] is None or row[key] == "":
        raise _Bad(key, "missing")
    v = row[key]
    if isinstance(v, str):
        v = v.strip()
        if re.fullmatch(r"[0-9]{1,18}", v):
            v = int(v)
    # Some exporters write 12.0; a bool is an int to Python but never a length.
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise _Bad(key, f"expected a positive integer, got {_shown(row[key])}")
    if v > MAX_TOKENS:
        raise _Bad(key, f"{_shown(v)} tokens is more than any context window ({MAX_TOKENS:,})")
    return v


def _shown(v: object) -> str:
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


_FRACTION = re.compile(r"(\.\d{6})\d+")


def _iso_seconds(text: str) -> float:
    # Python before 3.11 takes at most 6 fractional digits; Azure 2023 writes 7.
    t = datetime.fromisoformat(_FRACTION.sub(r"\1", text.strip()).replace("Z", "+00:00"))
    try:
        return (t if t.tzinfo else t.replace(tzinfo=timezone.utc)).timestamp()
    except OverflowError:  # year 1 or 9999 shifted past the calendar by its UTC offset
        raise ValueError(f"out of range: {text!r}") from None


def _timestamp(row: dict, key: str, scale: float = 1.0, iso: bool = True) -> float:
    v = row.get(key)
    if v is None or v == "":
        raise _Bad(key, "missing")
    if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= MAX_SECONDS / scale:
        return float(v) * scale  # NaN fails the comparison; a huge int never becomes a float
    if iso and isinstance(v, str):
        try:
            return _iso_seconds(v)
        except ValueError:
            pass
    want = "seconds (a non-negative number) or an ISO-8601 time" if iso else "a non-negative number"
    raise _Bad(key, f"expected {want}, got {_shown(v)}")


def _json(line: str, path: Path, n: int):
    try:
        return json.loads(line)
    except json.JSONDecodeError as e:
        raise WorkloadError(f"{path} line {n}: not valid JSON: {e.msg} (column {e.colno})") from None
    except RecursionError:
        raise WorkloadError(f"{path} line {n}: not valid JSON: nested too deeply") from None
    except ValueError as e:  # an integer longer than Python's digit limit, say
        raise WorkloadError(f"{path} line {n}: not valid JSON: {e}") from None


def _json_lines(path: Path) -> Iterator[tuple[int, dict]]:
    for n, line in text_lines(path, WorkloadError):
        if not line.strip():
            continue
        row = _json(line, path, n)
        if not isinstance(row, dict):
            raise WorkloadError(f"{path} line {n}: expected a JSON object, got {type(row).__name__}")
        yield n, row


def _ours(n: int, row: dict) -> TraceRecord:
    pid = row.get("prefix_id")
    if pid is not None and (isinstance(pid, bool) or not isinstance(pid, (str, int))):
        raise _Bad("prefix_id", f"expected a string or an integer, got {pid!r}")
    ptok = _positive_int(row, "prefix_tokens") if row.get("prefix_tokens") is not None else None
    return TraceRecord(_timestamp(row, "timestamp"), _positive_int(row, "prompt_tokens"),
                       _positive_int(row, "output_tokens"), None if pid is None else str(pid), ptok, n)


def _mooncake(n: int, row: dict) -> tuple[TraceRecord, list[int]]:
    ids = row.get("hash_ids", [])
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise _Bad("hash_ids", f"expected a list of integers, got {_shown(ids)}")
    rec = TraceRecord(_timestamp(row, "timestamp", scale=0.001, iso=False), _positive_int(row, "input_length"),
                      _positive_int(row, "output_length"), line=n)
    return rec, ids


def _shared_depths(all_ids: list[list[int]]) -> list[int]:
    """For each request, how many of its leading blocks some other request starts with too.

    A prefix tree over the hash-id paths, counting visits: linear in the total number of ids."""
    node_of: dict[tuple[int, int], int] = {}
    visits: list[int] = [0]
    paths = []
    for ids in all_ids:
        node, path = 0, []
        for h in ids:
            key = (node, h)
            if key not in node_of:
                node_of[key] = len(visits)
                visits.append(0)
            node = node_of[key]
            visits[node] += 1
            path.append(node)
        paths.append(path)
    return [sum(1 for node in path if visits[node] >= 2) for path in paths]


def _read_mooncake(path: Path) -> list[TraceRecord]:
    recs, ids = [], []
    for n, row in _json_lines(path):
        try:
            r, i = _mooncake(n, row)
        except _Bad as b:
            raise WorkloadError(f"{path} line {n}: field {b.field}: {b.why}") from None
        recs.append(r)
        ids.append(i)
    out = []
    for r, i, depth in zip(recs, ids, _shared_depths(ids)):
        if depth:
            # The first block names the group; the prefix is capped so that a prompt keeps a token of its own.
            shared = min(depth * MOONCAKE_BLOCK_TOKENS, r.prompt_tokens - 1)
            r = TraceRecord(r.at_s, r.prompt_tokens, r.output_tokens, f"mooncake:{i[0]}",
                            shared if shared >= 1 else None, r.line)
        out.append(r)
    return out


def _read_jsonl(path: Path) -> list[TraceRecord]:
    out, kinds = [], set()
    for n, row in _json_lines(path):
        try:
            r = _ours(n, row)
            kinds.add(isinstance(row.get("timestamp"), str))
            if len(kinds) > 1:
                raise _Bad("timestamp", "mixes ISO-8601 times and numbers of seconds in one trace")
        except _Bad as b:
            raise WorkloadError(f"{path} line {n}: field {b.field}: {b.why}") from None
        out.append(r)
    return out


def _read_azure(path: Path) -> list[TraceRecord]:
    out = []
    reader = csv.reader(line for _, line in text_lines(path, WorkloadError))
    try:
        header = next(reader, None)
    except csv.Error as e:
        raise WorkloadError(f"{path} line {reader.line_num}: not a CSV row: {e}") from None
    if header is None:
        raise WorkloadError(f"{path}: the trace is empty")
    if [h.strip() for h in header] != AZURE_HEADER:
        raise WorkloadError(f"{path} line 1: expected the Azure header {','.join(AZURE_HEADER)}, got {','.join(header)[:200]}")
    while True:
        try:
            cells = next(reader, None)
        except csv.Error as e:
            raise WorkloadError(f"{path} line {reader.line_num}: not a CSV row: {e}") from None
        if cells is None:
            break
        n = reader.line_num
        if not any(c.strip() for c in cells):
            continue
        if len(cells) != 3:
            raise WorkloadError(f"{path} line {n}: expected 3 columns ({','.join(AZURE_HEADER)}), got {len(cells)}")
        row = dict(zip(AZURE_HEADER, cells))
        try:
            at = _iso_seconds(row["TIMESTAMP"]) if row["TIMESTAMP"].strip() else None
        except ValueError:
            at = None
        try:
            if at is None:
                raise _Bad("TIMESTAMP", f"expected a time like 2023-11-16 18:17:03.9799600, got {_shown(row['TIMESTAMP'])}")
            out.append(TraceRecord(at, _positive_int(row, "ContextTokens"), _positive_int(row, "GeneratedTokens"), line=n))
        except _Bad as b:
            raise WorkloadError(f"{path} line {n}: field {b.field}: {b.why}") from None
    return out


def detect_format(path: Path) -> Format:
    """By extension, then by the first line's keys."""
    n, first = next(((n, line) for n, line in text_lines(path, WorkloadError) if line.strip()), (0, ""))
    if not first:
        raise WorkloadError(f"{path}: the trace is empty")
    if path.suffix.lower() == ".csv" or first.strip().startswith("TIMESTAMP"):
        return "azure"
    try:
        row = json.loads(first)
    except (ValueError, RecursionError):
        row = None
    if not isinstance(row, dict):
        raise WorkloadError(f"{path} line {n}: neither JSON lines nor an Azure CSV header; "
                            "give the format (jsonl, mooncake, azure)") from None
    keys = set(row)
    if "input_length" in keys:
        return "mooncake"
    if "prompt_tokens" in keys:
        return "jsonl"
    raise WorkloadError(f"{path} line 1: unknown trace format: expected prompt_tokens (ours) or "
                        f"input_length (Mooncake), got keys {sorted(keys)}")


def load_trace(path: Path | str, fmt: Literal["auto", "jsonl", "mooncake", "azure"] = "auto") -> Trace:
    path = Path(path)
    if fmt == "auto":
        fmt = detect_format(path)
    readers = {"jsonl": _read_jsonl, "mooncake": _read_mooncake, "azure": _read_azure}
    if fmt not in readers:
        raise WorkloadError(f"{path}: unknown trace format {fmt!r}; known: auto, {', '.join(readers)}")
    records = readers[fmt](path)
    if not records:
        raise WorkloadError(f"{path}: the trace is empty")
    late, latest = 0, -math.inf
    for r in records:
        late += r.at_s < latest
        latest = max(latest, r.at_s)
    records.sort(key=lambda r: r.at_s)  # stable: simultaneous requests keep their file order
    t0 = records[0].at_s
    records = [TraceRecord(r.at_s - t0, r.prompt_tokens, r.output_tokens, r.prefix_id, r.prefix_tokens, r.line)
               for r in records]
    trace = Trace(path, fmt, records, out_of_order=late)
    if late:
        trace.notes.append(f"{late} records out of time order; sorted")
    return trace


def _edges(values: list[int], parts: int) -> list[tuple[int, int]]:
    """Integer ranges covering values, split at their quantiles; ties collapse to fewer ranges."""
    s = sorted(values)
    cuts = sorted({s[min(len(s) - 1, math.ceil(len(s) * k / parts) - 1)] for k in range(1, parts)})
    bounds, lo = [], s[0]
    for c in cuts:
        if lo <= c < s[-1]:
            bounds.append((lo, c))
            lo = c + 1
    bounds.append((lo, s[-1]))
    return bounds


def _which(v: int, ranges: list[tuple[int, int]]) -> int:
    return next(i for i, (lo, hi) in enumerate(ranges) if v <= hi)


def _grid(trace: Trace, max_requests: int | None) -> tuple[list[TraceRecord], list[tuple[int, int]], list[tuple[int, int]]]:
    recs = trace.records[:max_requests] if max_requests else trace.records
    parts = 3 if len(recs) >= 90 else 2 if len(recs) >= 8 else 1  # ~10 per cell before splitting 3x3
    return recs, _edges([r.prompt_tokens for r in recs], parts), _edges([r.output_tokens for r in recs], parts)


def _label(p: tuple[int, int], o: tuple[int, int]) -> str:
    return Bucket(prompt_tokens=p, output_tokens=o).label


def _arrival(gaps: list[float], span: float, n: int) -> tuple[Arrival, str]:
    # Requests microseconds apart: the replay keeps their times; the summary's rate stays one a spec can hold.
    rate = min((n - 1) / span, RATE_MAX)
    if len(gaps) < MIN_GAPS_FOR_BURSTINESS:
        return Arrival(kind="poisson", rate=rate), f"Poisson at the mean rate (only {len(gaps)} gaps for a CV)"
    mean = statistics.fmean(gaps)
    cv = statistics.pstdev(gaps) / mean
    # The sample CV of exponential gaps wanders about 1/sqrt(n); call it Poisson within 2 of those.
    if abs(cv - 1) <= 2 / math.sqrt(len(gaps)):
        return Arrival(kind="poisson", rate=rate), f"Poisson (inter-arrival CV {cv:.2f})"
    k = min(100.0, max(0.01, 1 / cv**2)) if cv > 0 else 100.0
    return Arrival(kind="gamma", rate=rate, burstiness=round(k, 4)), f"gamma k=1/CV^2={k:.3g} (inter-arrival CV {cv:.2f})"


def trace_to_workload(trace: Trace, name: str | None = None, seed: int = 0, time_scale: float = 1.0,
                      max_requests: int | None = None) -> Workload:
    """The trace's shape: joint quantile buckets (tertiles from 90 records, medians from 8), weights
    by counts; arrivals at its mean rate, gamma from its inter-arrival CV; its prefix groups.

    time_scale multiplies the trace's clock (0.5 replays twice as fast)."""
    if time_scale <= 0:
        raise WorkloadError(f"{trace.path}: time_scale must be positive, got {time_scale}")
    recs, pr, orr = _grid(trace, max_requests)
    span = (recs[-1].at_s - recs[0].at_s) * time_scale
    if len(recs) < 2 or span <= 0:
        raise WorkloadError(f"{trace.path}: needs at least two distinct timestamps for an arrival rate "
                            f"({len(recs)} records within {span:g} s)")
    if not math.isfinite((len(recs) - 1) / span):
        raise WorkloadError(f"{trace.path}: {len(recs)} records within {span:g} s: no arrival rate can be sent")
    cells = Counter((_which(r.prompt_tokens, pr), _which(r.output_tokens, orr)) for r in recs)
    buckets = [Bucket(prompt_tokens=pr[i], output_tokens=orr[j], weight=c / len(recs))
               for (i, j), c in sorted(cells.items())]
    gaps = [(b.at_s - a.at_s) * time_scale for a, b in zip(recs, recs[1:])]
    arrival, how = _arrival(gaps, span, len(recs))
    notes = [f"{len(buckets)} buckets at the trace's quantiles ({len(pr)}x{len(orr)})", f"arrivals {how}"]
    prefix = None
    groups = trace.prefix_groups()
    grouped = [r for r in recs if r.prefix_id is not None]
    if grouped:
        lengths = trace.prefix_lengths()
        used = {groups[r.prefix_id] for r in grouped}
        want = int(statistics.median(lengths[g] for g in used))
        cap = min(b.prompt_tokens[0] for b in buckets) - 1  # the spec wants every prompt to hold the prefix
        if cap >= 1:
            prefix = Prefix(groups=len(used), tokens=min(want, cap), share=round(len(grouped) / len(recs), 6))
            clipped = f", clipped from {want} to fit the shortest prompt" if want > cap else ""
            notes.append(f"{len(used)} prefix groups of {prefix.tokens} tokens (median){clipped}")
        else:
            notes.append("prefix groups dropped: the shortest prompt cannot hold a prefix")
    scale = f", time x{time_scale:g}" if time_scale != 1 else ""
    return Workload(
        name=name or f"trace {trace.path.stem}", buckets=buckets, prefix=prefix, arrival=arrival,
        requests=len(recs), seed=seed,
        source=f"trace {trace.path.name} ({trace.format}, {len(recs)} records{scale}): " + "; ".join(notes + trace.notes),
    )


def trace_requests(trace: Trace, time_scale: float = 1.0, max_requests: int | None = None) -> list[PlannedRequest]:
    """The trace replayed exactly: its own send times and lengths, in the buckets trace_to_workload
    names, with its prefix ids as prefix groups (numbered in order of first appearance)."""
    if time_scale <= 0:
        raise WorkloadError(f"{trace.path}: time_scale must be positive, got {time_scale}")
    recs, pr, orr = _grid(trace, max_requests)
    groups = trace.prefix_groups()
    return [
        PlannedRequest(
            index=i, at_s=r.at_s * time_scale,
            bucket=_label(pr[_which(r.prompt_tokens, pr)], orr[_which(r.output_tokens, orr)]),
            prompt_tokens=r.prompt_tokens, output_tokens=r.output_tokens,
            prefix_group=groups[r.prefix_id] if r.prefix_id is not None else None, cancel_after_tokens=None,
        )
        for i, r in enumerate(recs)
    ]
