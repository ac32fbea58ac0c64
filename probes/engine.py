"""The engine probes: an engine's own /metrics sampled over a window (no Prometheus needed),
and what the engine says about itself (/version, /v1/models, config info metrics)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import httpx

from probes import _delta, _missing, gpu
from probes import http as _http
from probes.catalog import Dialect, detect_engines, dialects
from probes.errors import BadExposition, NotAnEngine, ProbeError, TargetUnreachable
from probes.exposition import Scrape, parse
from probes.http import HttpConfig
from probes.snapshot import EngineInfo, GpuStatus, Snapshot

log = logging.getLogger(__name__)

_CONFIG_DROP = {"engine", "model_name", "instance", "job", "pod"}


def _get(client: httpx.Client, url: str, path: str) -> httpx.Response:
    """GET within the request's total deadline; a failure is one line (TargetUnreachable, TlsError)."""
    return _http.request(client, "GET", url + path, what="engine")


def scrape(client: httpx.Client, url: str, cfg: HttpConfig | None = None) -> Scrape:
    """cfg: its caps on the page's bytes and lines (default: HttpConfig's)."""
    cfg = cfg or HttpConfig()
    t, text = fetch(client, url, cfg)
    return parse(text, t, max_lines=cfg.max_metrics_lines)


def fetch(client: httpx.Client, url: str, cfg: HttpConfig | None = None) -> tuple[float, str]:
    """(when it was asked, the /metrics text), unparsed: a caller timing something else in this
    process parses later, off its hot path. At most cfg.max_metrics_bytes are read."""
    t = time.monotonic()
    r = _http.request(client, "GET", url + "/metrics", what="engine",
                      max_bytes=(cfg or HttpConfig()).max_metrics_bytes, raise_with="ADVISOR_MAX_METRICS_BYTES")
    if r.status_code == 404:
        raise ProbeError(f"{url}/metrics returned 404: no metrics endpoint (not an engine, or metrics disabled)")
    if r.status_code in (401, 403):
        raise ProbeError(f"{url}/metrics returned HTTP {r.status_code}: "
                         + ("it wants credentials: user:password@ in the URL, ADVISOR_ENGINE_USER/ADVISOR_ENGINE_PASSWORD "
                            "or ADVISOR_ENGINE_TOKEN" if r.status_code == 401 else "the credentials given are not allowed"))
    if r.status_code >= 400:
        raise ProbeError(f"{url}/metrics returned HTTP {r.status_code}: engine unhealthy")
    return t, r.text


def detect(s: Scrape, engine: str | None, url: str) -> Dialect:
    if engine:
        if engine not in dialects():
            raise ProbeError(f"unknown engine {engine!r}; known: {', '.join(sorted(dialects()))}")
        return dialects()[engine]
    found = detect_engines(s.names)
    if not found:
        raise NotAnEngine(f"{url}/metrics holds no metrics of a known LLM engine")
    return dialects()[found[0]]


def _same_engine(dialect: Dialect, first: Scrape, s: Scrape, which: str, url: str) -> None:
    """NotAnEngine when a later scrape is no longer the first one's engine (two engines answer on one
    address, or a proxy alternates): counters of two engines cannot be subtracted."""
    if dialect.detected_in(s.names) or not dialect.detected_in(first.names):
        return
    now = detect_engines(s.names)
    raise NotAnEngine(f"{url}/metrics changed engine between scrapes: scrape 1 was {dialect.engine}, {which} is "
                      f"{' and '.join(now) if now else 'no known engine'} (does more than one process answer there?)")


def engine_info(client: httpx.Client, url: str, dialect: Dialect, s: Scrape, model: str | None) -> EngineInfo:
    """What the engine reveals. Optional endpoints that are missing are noted, never fatal."""
    info = EngineInfo(kind=dialect.engine)
    for path in ("/version", "/v1/models"):
        try:
            r = _get(client, url, path)
            if r.status_code != 200:
                info.problems.append(f"{path} returned HTTP {r.status_code}")
                continue
            body = r.json()
        except (TargetUnreachable, ValueError) as e:
            info.problems.append(f"{path}: {e}")
            continue
        if path == "/version" and isinstance(body, dict):
            info.version = str(body.get("version")) if body.get("version") else None
        elif path == "/v1/models" and isinstance(body, dict):
            raw = body.get("data")
            data = [m for m in raw if isinstance(m, dict)] if isinstance(raw, list) else []
            info.models = [str(m.get("id")) for m in data if m.get("id")]
            info.roots = [str(m.get("root")) for m in data if isinstance(m.get("root"), str) and m.get("root")]
            lens = [m.get("max_model_len") for m in data if isinstance(m.get("max_model_len"), int)]
            info.max_model_len = lens[0] if lens else None
    for spec in dialect.info.values():
        for name in spec.names:
            for labels, _ in s.series(name).items():
                lab = dict(labels)
                if model and dialect.model_label and lab.get(dialect.model_label, model) != model:
                    continue
                info.config = {k: v for k, v in lab.items() if k not in _CONFIG_DROP}
                info.config_source = f"{url}/metrics {name}"
                break
    return info


def _gpu_status(url: str, local_gpu: bool | None) -> GpuStatus:
    """NVML sees only this host's GPUs: read them when the engine is local (or when asked)."""
    if local_gpu is None:
        local_gpu = (httpx.URL(url).host or "") in ("127.0.0.1", "localhost", "::1")
    if not local_gpu:
        return GpuStatus(available=False, source="nvml",
                         reason="engine is remote: NVML reads only this host's GPUs (use DCGM via Prometheus)")
    return gpu.read_gpus()


def probe_engine(url: str, window_s: float = 60.0, model: str | None = None, engine: str | None = None,
                 timeout: float = 10.0, per_replica: bool = True, local_gpu: bool | None = None,
                 progress: Callable[[float, float], None] | None = None,
                 transport: httpx.BaseTransport | None = None, sleep: Callable[[float], None] = time.sleep,
                 http: HttpConfig | None = None) -> Snapshot:
    """Sample url/metrics over window_s: counters and histograms from their increases scrape to
    scrape (a reset noted), gauges from every scrape. http: TLS and credentials (default: verified TLS, none;
    user info in the URL is taken as credentials and never shown); timeout: each request's deadline."""
    url, userinfo = _http.split_userinfo(url)
    url = url.rstrip("/")
    cfg = http or HttpConfig()
    cfg = cfg.with_(timeout=timeout, auth=userinfo or cfg.auth)
    with _http.client(cfg, transport=transport) as client:
        first = scrape(client, url, cfg)
        dialect = detect(first, engine, url)
        scrapes, problems = [first], []
        steps = max(1, min(10, int(window_s)))
        for i in range(steps):
            if progress:
                progress(i * window_s / steps, window_s)
            sleep(window_s / steps)
            try:
                scrapes.append(scrape(client, url, cfg))
            except (ProbeError, BadExposition) as e:
                problems.append(f"scrape {i + 2} of {steps + 1} failed: {e}")
                break
            _same_engine(dialect, first, scrapes[-1], f"scrape {i + 2} of {steps + 1}", url)
        if len(scrapes) < 2:
            raise TargetUnreachable(f"engine at {url} stopped answering before a second scrape: {problems[-1]}")
        problems += _delta.notes(scrapes, dialect)  # duplicate series, self-contradicting histograms, counter resets
        info = engine_info(client, url, dialect, scrapes[-1], model)
        groups = _delta.compute(dialect, scrapes, model, per_replica=False)
        snap = Snapshot(target=url, via="engine", window_s=scrapes[-1].t - first.t, model=model,
                        engine=info, signals=groups.get((), {}), queries=len(scrapes) + 2, problems=problems)
        snap.gpu = _gpu_status(url, local_gpu)
        if snap.gpu.available:
            snap.signals.update(gpu.summarize(snap.gpu, snap.window_s))
        _missing.fill(snap.signals, dialect.engine, snap.gpu.reason, snap.window_s)
        if per_replica:
            snap.replicas = _delta.to_replicas(_delta.compute(dialect, scrapes, model, per_replica=True))
        return snap
