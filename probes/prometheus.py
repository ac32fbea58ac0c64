"""The Prometheus probe: every signal over a window, in aggregate and per replica, from a few queries.

Each dialect's signals read shared primitives (probes/_promql.py: bucket rates, summed rates, gauges
over the window), fetched in one POSTed query per dialect and breakdown (aggregate, per replica),
and computed here (probes/_primitives.py) the way Prometheus would compute each signal's own query.
Engine info (models, config) rides along in the engine's aggregate query.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Union

import httpx

from probes import _missing, _primitives, _promql, _replicas, _sense
from probes import http as _http
from probes._promql import Primitive, SignalPlan, duration, selector
from probes.catalog import GPU_DIALECT, Dialect, detect_engines, dialects, signal_unit, signals_for
from probes.errors import NotAnEngine, ProbeError
from probes.exposition import series_text
from probes.http import HttpConfig
from probes.snapshot import EngineInfo, GpuDevice, GpuStatus, Signal, Snapshot

__all__ = ["PrometheusClient", "duration", "probe_prometheus", "selector"]

log = logging.getLogger(__name__)

# Labels of an info metric's series that say where it was scraped, not how the engine is configured.
NOT_CONFIG = {"__name__", "instance", "job", "pod", "engine", "namespace", _promql.PART_LABEL}
# Answers to a POST that mean "this endpoint takes no POST": switch to GET.
POST_REFUSED = (405, 501)
# Answers that a second try may get past (a proxy or a busy server): retried once.
RETRY_ON = (502, 503, 504)
RETRY_PAUSE_S = 0.2
# Answers to a combined query that asking its parts one by one can get around: a parse or execution
# error (a construct the server lacks, too many samples for one query) or a body or URL too long.
# Not 401/403/404: every part would be refused alike.
SPLIT_ON = (400, 413, 414, 422, 431)


class _Rejected(ProbeError):
    """Prometheus (or a proxy before it) answered a query with an HTTP error status."""

    def __init__(self, message: str, status: int, detail: str):
        super().__init__(message)
        self.status = status
        self.detail = detail


class PrometheusClient:
    """The one Prometheus client (the probe, the workload read from telemetry, the demo stack's
    Prometheus all use it). Instant queries POSTed as a form (no URL length limit; GET where POST is refused), one retry
    on 502/503/504, a count of every HTTP request (retries included), and our error types. Requests
    go through probes.http: TLS verified unless the config opts out, its credentials (or those in
    the URL's user info, which never reach a message), and a total deadline per request."""

    def __init__(self, url: str, timeout: float, http: HttpConfig | None = None):
        url, userinfo = _http.split_userinfo(url)
        self.url = url.rstrip("/")
        cfg = http or HttpConfig()
        self.cfg = cfg.with_(timeout=timeout, auth=userinfo or cfg.auth)
        self.queries = 0
        self.method = "POST"
        self.notes: list[str] = []
        self._lock = threading.Lock()
        self._http = _http.client(self.cfg)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "PrometheusClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _count(self) -> None:
        with self._lock:
            self.queries += 1

    def _once(self, method: str, endpoint: str, form: dict | None) -> httpx.Response:
        self._count()
        kw = {"data": form} if method == "POST" else {"params": form}
        return _http.request(self._http, method, endpoint, what="Prometheus", **kw)

    def _retrying(self, method: str, endpoint: str, form: dict | None) -> httpx.Response:
        resp = self._once(method, endpoint, form)
        if resp.status_code in RETRY_ON:
            time.sleep(RETRY_PAUSE_S)
            resp = self._once(method, endpoint, form)
        return resp

    def _send(self, form: dict) -> httpx.Response:
        endpoint = f"{self.url}/api/v1/query"
        if self.method == "POST":
            resp = self._retrying("POST", endpoint, form)
            if resp.status_code not in POST_REFUSED:
                return resp
            with self._lock:
                if self.method == "POST":
                    self.method = "GET"
                    self.notes.append(f"Prometheus at {self.url} refused a POST (HTTP {resp.status_code}); "
                                      "queries went by GET")
        return self._retrying("GET", endpoint, form)

    def query(self, promql: str, at: datetime | None) -> list[dict]:
        form = {"query": promql}
        if at:
            form["time"] = f"{at.timestamp():.3f}"
        resp = self._send(form)
        if resp.status_code != 200:
            detail = f"HTTP {resp.status_code}: {_error_text(resp)}"
            shown = promql if len(promql) <= 400 else f"{promql[:400]}... ({len(promql)} characters)"
            raise _Rejected(f"Prometheus rejected a query ({detail}){_auth_hint(resp.status_code)}: {shown}",
                            resp.status_code, detail)
        try:
            result = resp.json()["data"]["result"]
        except (ValueError, KeyError, TypeError) as e:  # a 200 that is not a Prometheus answer
            raise ProbeError(f"{self.url} does not answer like a Prometheus server: {str(e)[:200]}") from e
        if isinstance(result, list) and len(result) > self.cfg.max_series:
            # Before any row is read: the work after this grows with every series.
            raise ProbeError(f"Prometheus at {self.url} answered a query with {len(result):,} series, more than the "
                             f"cap of {self.cfg.max_series:,} (ADVISOR_MAX_SERIES raises it; a per-replica query "
                             "holds about 200 series per vLLM replica, --model narrows it to one model)")
        return result

    def ready(self) -> bool:
        """Whether the server answers /-/ready with 200 (started, its TSDB loaded): a server that is
        not listening yet, or answers otherwise, is not ready."""
        try:
            return self._once("GET", self.url + "/-/ready", None).status_code == 200
        except ProbeError:
            return False

    def metric_names(self) -> set[str]:
        path = "/api/v1/label/__name__/values"
        resp = self._retrying("GET", self.url + path, None)
        if resp.status_code in (401, 403):
            raise ProbeError(f"Prometheus at {self.url} refused {path} (HTTP {resp.status_code}: "
                             f"{_error_text(resp)}){_auth_hint(resp.status_code)}")
        if resp.status_code != 200:
            raise ProbeError(f"{self.url} does not answer like a Prometheus server: HTTP {resp.status_code} "
                             f"on {path}: {_error_text(resp)}")
        try:
            names = resp.json()["data"]
        except (ValueError, KeyError, TypeError) as e:
            raise ProbeError(f"{self.url} does not answer like a Prometheus server: {str(e)[:200]}") from e
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ProbeError(f"{self.url} does not answer like a Prometheus server: {path} holds no list of names")
        return set(names)


def _auth_hint(status: int) -> str:
    if status == 401:
        return "; it wants credentials: user:password@ in the URL, ADVISOR_PROM_USER/ADVISOR_PROM_PASSWORD or ADVISOR_PROM_TOKEN"
    if status == 403:
        return "; the credentials given are not allowed there"
    return ""


def _error_text(resp: httpx.Response) -> str:
    """Prometheus' own error message where the body is its JSON, else the start of the body."""
    try:
        said = resp.json().get("error")
    except (ValueError, AttributeError):
        said = None
    return str(said or resp.text.strip() or resp.reason_phrase or "no message")[:200]


@dataclass
class _Breakdown:
    """One dialect's signals in aggregate (by=None) or per replica, and the primitives they read."""

    dialect: Dialect
    by: list[str] | None
    plans: dict[str, SignalPlan]
    extra: list[Primitive] = field(default_factory=list)  # engine info, aggregate only

    @property
    def prims(self) -> list[Primitive]:
        return list(dict.fromkeys([*_promql.primitives(list(self.plans.values())), *self.extra]))

    @property
    def what(self) -> str:
        return f"{self.dialect.engine} {'per-replica' if self.by else 'aggregate'}"


PerReplica = Union[bool, Collection[str]]


def _plan(dialect: Dialect, available: set[str], model: str | None, window_s: float,
          per_replica: PerReplica) -> tuple[dict[str, Signal], list[_Breakdown]]:
    """Signals the target cannot give (not exposed), and the breakdowns to fetch for the others."""
    missing: dict[str, Signal] = {}
    resolved: dict[str, list[str]] = {}
    for name, sdef in signals_for(dialect).items():
        names = [dialect.resolve(o, available) for o in sdef.operands()]
        if None in names:
            wanted = " / ".join(dialect.metrics[o].names[0] for o, n in zip(sdef.operands(), names) if n is None)
            missing[name] = Signal(name=name, unit=signal_unit(name), window_s=window_s, source=wanted,
                                   missing=f"not exposed by the target ({wanted})")
        else:
            resolved[name] = names

    def plans(by: list[str] | None, only: Collection[str] | None = None) -> dict[str, SignalPlan]:
        return {name: _promql.plan_signal(name, signals_for(dialect)[name], dialect, names, model, window_s, by)
                for name, names in resolved.items() if only is None or name in only}

    out = [_Breakdown(dialect, None, plans(None))]
    if per_replica is not False and dialect.replica_labels:
        only = None if per_replica is True else _with_one(set(per_replica) & set(resolved), resolved)
        out.append(_Breakdown(dialect, list(dialect.replica_labels), plans(dialect.replica_labels, only)))
    return missing, out


def _with_one(chosen: set[str], resolved: dict[str, list[str]]) -> set[str]:
    """At least one signal per replica, so that the replicas (and their count) are known."""
    return chosen or ({"request_rate"} & set(resolved)) or set(sorted(resolved)[:1])


def _fetch(client: PrometheusClient, breakdowns: list[_Breakdown], at: datetime | None,
           pool: ThreadPoolExecutor) -> tuple[dict[Primitive, list[dict]], list[str]]:
    """The rows of every primitive: one query per breakdown (its primitives tagged and OR-ed), in
    parallel. Where Prometheus refuses a combined query with a 4xx that splitting can get around
    (SPLIT_ON: too long, or a construct it does not support), its primitives are asked one by one,
    and a note says so."""
    rows: dict[Primitive, list[dict]] = {}
    notes: list[str] = []
    jobs = [(b, b.prims) for b in breakdowns]
    futures = [(b, prims, pool.submit(_combined, client, prims, at)) for b, prims in jobs if prims]
    one_by_one: list[Primitive] = []
    for b, prims, fut in futures:
        try:
            got, more = fut.result()
            rows.update(got)
            notes += more
        except _Rejected as e:
            if len(prims) == 1 or e.status not in SPLIT_ON:
                raise
            notes.append(f"Prometheus refused the combined {b.what} query of {len(prims)} expressions "
                         f"({e.detail}); asked for them one by one")
            one_by_one += prims
    singles = [pool.submit(_combined, client, [p], at) for p in one_by_one]
    for fut in singles:
        got, more = fut.result()
        rows.update(got)
        notes += more
    return rows, notes


def _combined(client: PrometheusClient, prims: list[Primitive], at: datetime | None) -> tuple[dict[Primitive, list[dict]], list[str]]:
    """The rows of each primitive, checked (_primitives.checked_rows: a vector, each series once),
    and notes on what the answer got wrong."""
    if len(prims) == 1:
        rows, notes = _primitives.checked_rows(client.query(prims[0].expr, at), client.url, prims[0].expr)
        return {prims[0]: rows}, notes
    ids = {f"p{i}": p for i, p in enumerate(prims)}
    out: dict[Primitive, list[dict]] = {p: [] for p in prims}
    rows, notes = _primitives.checked_rows(client.query(_promql.combine([(i, p.expr) for i, p in ids.items()]), at),
                                           client.url, f"a combined query of {len(prims)} expressions")
    for row in rows:
        p = ids.get(row.get("metric", {}).get(_promql.PART_LABEL))
        if p is not None:
            out[p].append(row)
    return out, notes


def _signal(plan: SignalPlan, v: float, window_s: float, note: str | None,
            bucket: tuple[float, float] | None = None, refused: str | None = None,
            dialect: Dialect | None = None) -> Signal:
    """refused: why a row the signal read cannot be (_refused_rows); the value itself is checked too."""
    unit = signal_unit(plan.name)
    refused = refused or (_sense.check_signal(plan.name, plan.sdef, dialect, v, plan.source) if dialect else None)
    if refused:
        return Signal(name=plan.name, unit=unit, window_s=window_s, source=plan.source, missing=refused)
    if math.isfinite(v):
        return Signal(name=plan.name, value=v, unit=unit, window_s=window_s, source=plan.source, note=note,
                      bucket=bucket)
    if math.isnan(v):
        why = _primitives.why_empty(plan.sdef)
    else:  # quantiles are always finite here (bucket_quantile); a ratio or mean over a zero denominator
        why = "infinite: a division by zero"
    return Signal(name=plan.name, unit=unit, window_s=window_s, source=plan.source, missing=why)


def _signals(b: _Breakdown, rows: dict[Primitive, list[dict]], model: str | None,
             window_s: float) -> dict[tuple, dict[str, Signal]]:
    """Per group (() for the aggregate), each signal. An aggregate signal whose primitives came back
    empty is missing: no series."""
    out: dict[tuple, dict[str, Signal]] = {}
    answers = {p: _primitives.Answer(rows[p], b.by) for p in b.prims}
    checked: dict[tuple, dict[tuple, str]] = {}
    for name, plan in b.plans.items():
        got = _primitives.compute(plan, [answers[p] for p in plan.prims])
        refused = _refused_rows(b, plan, answers, checked)
        buckets = (_primitives.quantile_buckets(plan.sdef, [answers[p].buckets for p in plan.prims])
                   if plan.sdef.op == "quantile" else {})
        if b.by is None and () not in got:
            why = "no series in the window" + (f" for model {model!r}" if model else "")
            out.setdefault((), {})[name] = Signal(name=name, unit=signal_unit(name), window_s=window_s,
                                                  source=plan.source, missing=why)
            continue
        for g, (v, note) in got.items():
            out.setdefault(g, {})[name] = _signal(plan, v, window_s, note, buckets.get(g), refused.get(g), b.dialect)
    return out


def _refused_rows(b: _Breakdown, plan: SignalPlan, answers: dict[Primitive, _primitives.Answer],
                  checked: dict[tuple, dict[tuple, str]]) -> dict[tuple, str]:
    """Per group, why a row the signal reads cannot be (probes/_sense.py: a negative rate or gauge, a
    share above its whole), naming the primitive, the row's labels and its value; each primitive's
    rows are read once per way of reading them."""
    out: dict[tuple, str] = {}
    for key, prim in zip(_sense.operand_keys(plan.sdef), plan.prims):
        k = (prim, key, plan.sdef.op)
        if k not in checked:
            spec, found = b.dialect.metrics[key], {}
            for r in answers[prim].rows:
                labels = r.get("metric", {})
                g = _primitives.group_key(labels, b.by)
                if g in found:
                    continue
                shown = tuple(sorted((n, v) for n, v in labels.items() if n != _promql.PART_LABEL and v))
                why = _sense.check(spec, series_text(prim.expr, shown), _primitives.value_of(r), plan.sdef.op,
                                   combined=True)
                if why:
                    found[g] = why
            checked[k] = found
        for g, why in checked[k].items():
            out.setdefault(g, why)
    return out


def _assemble(breakdowns: list[_Breakdown], rows: dict[Primitive, list[dict]], model: str | None,
              window_s: float) -> tuple[dict[str, Signal], dict[tuple, dict[str, Signal]]]:
    """One dialect's aggregate signals, and its signals per replica group."""
    agg: dict[str, Signal] = {}
    groups: dict[tuple, dict[str, Signal]] = {}
    for b in breakdowns:
        got = _signals(b, rows, model, window_s)
        if b.by is None:
            agg.update(got.get((), {}))
        else:
            for g, sigs in got.items():
                groups.setdefault(g, {}).update(sigs)
    return agg, groups


def _info_prims(dialect: Dialect, available: set[str], model: str | None,
                window_s: float) -> tuple[Primitive | None, dict[str, Primitive]]:
    """The models query and, per info metric the target exposes, its query (metric name -> query)."""
    models = _promql.models_expr(dialect, window_s) if dialect.model_label else None
    infos = {spec.names[0]: _promql.info_expr(dialect, spec, model, window_s) for spec in dialect.info.values()
             if spec.names[0] in available}
    return models, infos


def _engine_info(dialect: Dialect, models: Primitive | None, infos: dict[str, Primitive],
                 rows: dict[Primitive, list[dict]]) -> EngineInfo:
    info = EngineInfo(kind=dialect.engine)
    if models is not None:
        info.models = sorted({r.get("metric", {}).get(dialect.model_label, "") for r in rows[models]} - {""})
    for name, prim in infos.items():
        if not rows[prim]:
            continue
        configs = sorted(({k: v for k, v in r.get("metric", {}).items() if k not in NOT_CONFIG} for r in rows[prim]),
                         key=lambda c: sorted(c.items()))
        info.config = configs[0]
        info.config_source = f"Prometheus: {prim.expr}"
        # Only V1's metrics logger labels its series by engine index (vllm/v1/metrics/loggers.py).
        if dialect.engine == "vllm" and any("engine" in r.get("metric", {}) for r in rows[prim]):
            info.generation = "V1"
        if any(c != configs[0] for c in configs[1:]):
            info.problems.append(f"{name} differs across {len(configs)} replicas; showing the first")
    return info


def probe_prometheus(url: str, window_s: float = 60.0, model: str | None = None, at: datetime | None = None,
                     engine: str | None = None, timeout: float = 10.0, per_replica: PerReplica = True,
                     http: HttpConfig | None = None) -> Snapshot:
    """Read a deployment through its Prometheus into one Snapshot. per_replica: every signal per
    replica and per GPU too (True), none (False), or only the named ones (and one more where none
    is a signal of the engine or the GPU, so that replicas and GPUs are still counted). http: TLS
    and credentials (default: verified TLS, no credentials); timeout is each request's deadline."""
    with PrometheusClient(url, timeout, http) as client:
        return _probe(client, window_s, model, at, engine, per_replica)


def _probe(client: PrometheusClient, window_s: float, model: str | None, at: datetime | None, engine: str | None,
           per_replica: PerReplica) -> Snapshot:
    available = client.metric_names()
    engines = [engine] if engine else detect_engines(available)
    if engine and engine not in dialects():
        raise ProbeError(f"unknown engine {engine!r}; known: {', '.join(sorted(dialects()))}")
    if not engines:
        raise NotAnEngine(f"Prometheus at {client.url} holds no metrics of a known engine "
                          f"({', '.join(sorted(k for k in dialects() if k != GPU_DIALECT))})")
    dialect = dialects()[engines[0]]
    snap = Snapshot(target=client.url, via="prometheus", window_s=window_s, model=model,
                    taken_at=at or datetime.now(timezone.utc))
    if len(engines) > 1:
        snap.problems.append(f"several engines found ({', '.join(engines)}); reading {engines[0]}")

    missing, breakdowns = _plan(dialect, available, model, window_s, per_replica)
    models, infos = _info_prims(dialect, available, model, window_s)
    breakdowns[0].extra = [p for p in (models, *infos.values()) if p is not None]
    gpu = dialects()[GPU_DIALECT]
    gpu_missing: dict[str, Signal] = {}
    gpu_breakdowns: list[_Breakdown] = []
    if gpu.detected_in(available):
        gpu_missing, gpu_breakdowns = _plan(gpu, available, None, window_s, per_replica)

    pool = ThreadPoolExecutor(max_workers=8)
    try:
        rows, notes = _fetch(client, breakdowns + gpu_breakdowns, at, pool)
    finally:
        # Not `with`: on an interrupt its exit would wait for every query still in flight.
        pool.shutdown(wait=False, cancel_futures=True)

    agg, reps = _assemble(breakdowns, rows, model, window_s)
    snap.signals.update({**missing, **agg})
    snap.replicas = _replicas.fold(reps)
    if gpu_breakdowns:
        gagg, gdev = _assemble(gpu_breakdowns, rows, None, window_s)
        snap.signals.update({**gpu_missing, **gagg})
        snap.gpu = GpuStatus(available=True, source="dcgm-exporter via Prometheus", devices=[
            GpuDevice(index=i, name="/".join(v for _, v in k), labels=dict(k), signals=s)
            for i, (k, s) in enumerate(sorted(gdev.items()))])
    else:
        snap.gpu = GpuStatus(available=False, source="dcgm-exporter via Prometheus",
                             reason="no DCGM exporter metrics in this Prometheus")
    snap.engine = _engine_info(dialect, models, infos, rows)
    snap.problems += client.notes + notes
    _missing.fill(snap.signals, dialect.engine, snap.gpu.reason, window_s)
    snap.queries = client.queries
    return snap
