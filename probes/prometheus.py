"""The Prometheus probe: every signal as PromQL over a window, in aggregate and per replica."""

from __future__ import annotations

import logging
import math
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from urllib3.util.retry import Retry

from probes import _missing, _promql, _replicas
from probes.catalog import GPU_DIALECT, Dialect, dialects, detect_engines, signal_unit, signals_for
from probes.errors import NotAnEngine, ProbeError, TargetUnreachable
from probes.snapshot import INTERPOLATED, EngineInfo, GpuDevice, GpuStatus, Signal, Snapshot

log = logging.getLogger(__name__)

NO_TRAFFIC = "no traffic in the window"


class _Client:
    """prometheus-api-client with a short retry, a query counter, and our error types."""

    def __init__(self, url: str, timeout: float):
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.queries = 0
        self._lock = threading.Lock()
        self._prom = PrometheusConnect(url=self.url, disable_ssl=True, timeout=timeout,
                                       retry=Retry(total=1, backoff_factor=0.2, status_forcelist=[502, 503, 504]))

    def _count(self) -> None:
        with self._lock:
            self.queries += 1

    def query(self, promql: str, at: datetime | None) -> list[dict]:
        self._count()
        params = {"time": f"{at.timestamp():.3f}"} if at else None
        try:
            return self._prom.custom_query(promql, params=params)
        except requests.exceptions.RequestException as e:
            raise TargetUnreachable(f"Prometheus at {self.url} is unreachable: {type(e).__name__}") from e
        except PrometheusApiClientException as e:
            raise ProbeError(f"Prometheus rejected a query ({str(e)[:200]}): {promql}") from e
        except ValueError as e:  # a 200 that is not JSON: not a Prometheus
            raise ProbeError(f"{self.url} does not answer like a Prometheus server: {e}") from e

    def metric_names(self) -> set[str]:
        self._count()
        try:
            return set(self._prom.all_metrics())
        except requests.exceptions.RequestException as e:
            raise TargetUnreachable(f"Prometheus at {self.url} is unreachable: {type(e).__name__}") from e
        except (PrometheusApiClientException, ValueError, KeyError, TypeError) as e:
            raise ProbeError(f"{self.url} does not answer like a Prometheus server: {str(e)[:200]}") from e


def _value(row: dict) -> float:
    try:
        return float(row["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return math.nan


def _signal(name: str, v: float, window_s: float, source: str, why_nan: str, note: str | None) -> Signal:
    unit = signal_unit(name)
    if math.isfinite(v):
        return Signal(name=name, value=v, unit=unit, window_s=window_s, source=source, note=note)
    why = why_nan if math.isnan(v) else "infinite: the quantile lies in the +Inf bucket"
    return Signal(name=name, unit=unit, window_s=window_s, source=source, missing=why)


def _signals_for_dialect(client: _Client, dialect: Dialect, available: set[str], model: str | None,
                         window_s: float, at: datetime | None, pool: ThreadPoolExecutor,
                         per_replica: bool) -> tuple[dict[str, Signal], dict[tuple, dict[str, Signal]]]:
    aggregate: dict[str, Signal] = {}
    replicas: dict[tuple, dict[str, Signal]] = {}
    jobs = []
    for name, sdef in signals_for(dialect).items():
        names = [dialect.resolve(o, available) for o in sdef.operands()]
        if None in names:
            wanted = " / ".join(dialect.metrics[o].names[0] for o, n in zip(sdef.operands(), names) if n is None)
            aggregate[name] = Signal(name=name, unit=signal_unit(name), window_s=window_s,
                                     source=wanted, missing=f"not exposed by the target ({wanted})")
            continue
        q = _promql.build(sdef, dialect, names, model, window_s)
        jobs.append((name, sdef, None, q, pool.submit(client.query, q, at)))
        if per_replica and dialect.replica_labels:
            qr = _promql.build(sdef, dialect, names, model, window_s, by=dialect.replica_labels)
            jobs.append((name, sdef, "r", qr, pool.submit(client.query, qr, at)))
    for name, sdef, kind, q, fut in jobs:
        rows = fut.result()
        gauge = sdef.op in ("avg", "max", "share")
        why_nan = "no samples in the window" if gauge else NO_TRAFFIC
        note = INTERPOLATED if sdef.op == "quantile" else None
        if kind is None:
            if not rows:
                why = "no series in the window" + (f" for model {model!r}" if model else "")
                aggregate[name] = Signal(name=name, unit=signal_unit(name), window_s=window_s, source=q, missing=why)
            else:
                aggregate[name] = _signal(name, _value(rows[0]), window_s, q, why_nan, note)
            continue
        for row in rows:
            labels = row.get("metric", {})
            key = tuple((k, labels[k]) for k in dialect.replica_labels if labels.get(k))
            replicas.setdefault(key, {})[name] = _signal(name, _value(row), window_s, q, why_nan, note)
    return aggregate, replicas


def _engine_info(client: _Client, dialect: Dialect, model: str | None, window_s: float,
                 at: datetime | None) -> EngineInfo:
    info = EngineInfo(kind=dialect.engine)
    if dialect.model_label:
        q = f"count by ({dialect.model_label}) (last_over_time({dialect.detect[0]}[{_promql.duration(window_s)}]))"
        rows = client.query(q, at)
        info.models = sorted({r["metric"].get(dialect.model_label, "") for r in rows} - {""})
    for spec in dialect.info.values():
        sel = f'{{{dialect.model_label}="{model}"}}' if model and dialect.model_label else ""
        q = f"last_over_time({spec.names[0]}{sel}[{_promql.duration(window_s)}])"
        rows = client.query(q, at)
        if not rows:
            continue
        configs = [{k: v for k, v in r["metric"].items() if k not in ("__name__", "instance", "job", "pod", "engine", "namespace")} for r in rows]
        info.config = configs[0]
        info.config_source = f"Prometheus: {q}"
        if any(c != configs[0] for c in configs[1:]):
            info.problems.append(f"{spec.names[0]} differs across {len(configs)} replicas; showing the first")
    return info


def probe_prometheus(url: str, window_s: float = 60.0, model: str | None = None, at: datetime | None = None,
                     engine: str | None = None, timeout: float = 10.0, per_replica: bool = True) -> Snapshot:
    """Read a deployment through its Prometheus into one Snapshot."""
    client = _Client(url, timeout)
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
    with ThreadPoolExecutor(max_workers=8) as pool:
        agg, reps = _signals_for_dialect(client, dialect, available, model, window_s, at, pool, per_replica)
        snap.signals.update(agg)
        snap.replicas = _replicas.fold(reps)
        gpu = dialects()[GPU_DIALECT]
        if gpu.detected_in(available):
            gagg, gdev = _signals_for_dialect(client, gpu, available, None, window_s, at, pool, per_replica)
            snap.signals.update(gagg)
            snap.gpu = GpuStatus(available=True, source="dcgm-exporter via Prometheus", devices=[
                GpuDevice(index=i, name="/".join(v for _, v in k), labels=dict(k), signals=s)
                for i, (k, s) in enumerate(sorted(gdev.items()))])
        else:
            snap.gpu = GpuStatus(available=False, source="dcgm-exporter via Prometheus",
                                 reason="no DCGM exporter metrics in this Prometheus")
        snap.engine = _engine_info(client, dialect, model, window_s, at)
    _missing.fill(snap.signals, dialect.engine, snap.gpu.reason, window_s)
    snap.queries = client.queries
    return snap
