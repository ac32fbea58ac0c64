"""One engine's /metrics watched while the caller runs something (an experiment's block): scraped
when the watch starts, every `every_s` meanwhile (gauges such as running and waiting requests
only mean something while the load runs) and when it stops, and turned into the same signals the
engine probe computes (probes/_delta.py), so "queue time p95" means the same in a diagnosis and
in an experiment's server readouts."""

from __future__ import annotations

import threading

import httpx

from probes import _delta, _missing
from probes import http as _http
from probes._primitives import GAUGE_OPS
from probes.catalog import Dialect, signals_for
from probes.engine import detect, engine_info, fetch, scrape
from probes.errors import BadExposition, ProbeError
from probes.exposition import Scrape, parse
from probes.http import HttpConfig
from probes.snapshot import EngineInfo, Signal


# The caller's load starts right after start(): sampled this soon, a short block has its gauges read.
FIRST_AFTER_S = 0.25


NOT_SAMPLED = "not sampled while the load ran (the window ended before a scrape inside it)"


class Watch:
    """start() scrapes once (raises ProbeError when the engine's /metrics cannot be read: the
    caller decides whether that matters); stop() scrapes again and returns the window's signals.
    A scrape that fails in between is skipped and counted in `problems`."""

    def __init__(self, url: str, engine: str | None = None, model: str | None = None, every_s: float = 0.5,
                 http: HttpConfig | None = None, transport: httpx.BaseTransport | None = None):
        self.url, userinfo = _http.split_userinfo(url)
        self.url = self.url.rstrip("/")
        cfg = http or HttpConfig()
        self._cfg = cfg.with_(timeout=min(cfg.timeout or 5.0, 5.0), auth=userinfo or cfg.auth)
        self._engine, self._model, self._every = engine, model, every_s
        self._transport = transport
        self._scrapes: list[Scrape] = []
        self._raw: list[tuple[float, str]] = []  # taken during the window, parsed at stop()
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._client: httpx.Client | None = None
        self.dialect: Dialect | None = None
        self.problems: list[str] = []
        self.info: EngineInfo | None = None

    def start(self, describe: bool = False) -> Watch:
        """describe: also ask the engine what it is (/version, /v1/models, config info metrics)
        into `info`."""
        self._client = _http.client(self._cfg, transport=self._transport)
        try:
            first = scrape(self._client, self.url, self._cfg)
            self.dialect = detect(first, self._engine, self.url)
            if describe:
                self.info = engine_info(self._client, self.url, self.dialect, first, self._model)
        except BaseException:
            self._client.close()
            raise
        self._scrapes = [first]
        self._thread = threading.Thread(target=self._loop, name="metrics-watch", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        # Only the HTTP fetch happens here: parsing a large /metrics page holds the GIL, and the
        # caller's load generator in this process timestamps tokens meanwhile. The first scrape comes
        # soon after the start: a block of a tiny model can end within one interval, and its gauges
        # are only sampled while the load runs.
        wait = min(FIRST_AFTER_S, self._every)
        while not self._done.wait(wait):
            wait = self._every
            try:
                got = fetch(self._client, self.url, self._cfg)
            except Exception as e:  # noqa: BLE001 - a scrape lost is a note, never the caller's failure
                self.problems.append(str(e) or type(e).__name__)
                continue
            with self._lock:
                self._raw.append(got)

    def close(self) -> None:
        """Stop scraping and release the connection, reading nothing (the caller's work failed)."""
        self._done.set()
        if self._thread:
            self._thread.join(timeout=10)
        if self._client is not None:
            self._client.close()

    def stop(self) -> dict[str, Signal]:
        """The window's signals (every catalog signal: absent ones with the reason why)."""
        self._done.set()
        if self._thread:
            self._thread.join(timeout=10)
        try:
            try:
                last = scrape(self._client, self.url, self._cfg)
            except (ProbeError, BadExposition) as e:
                self.problems.append(f"last scrape failed: {e}")
            else:
                with self._lock:
                    self._scrapes.append(last)
        finally:
            self._client.close()
        with self._lock:
            raw = list(self._raw)
        for t, text in raw:
            try:
                self._scrapes.append(parse(text, t, max_lines=self._cfg.max_metrics_lines))
            except BadExposition as e:
                self.problems.append(f"a scrape could not be parsed: {e}")
        scrapes = sorted(self._scrapes, key=lambda s: s.t)
        window = scrapes[-1].t - scrapes[0].t
        if len(scrapes) < 2:
            raise ProbeError(f"{self.url}/metrics answered only once during the window: "
                             + "; ".join(self.problems[-1:]))
        signals = _delta.compute(self.dialect, scrapes, self._model, per_replica=False).get((), {})
        inner = scrapes[1:-1]
        if inner:
            # Gauges from the scrapes taken while the caller's work ran: the first and the last
            # bracket it and are idle by construction, which would pull a short block's averages
            # towards zero. Counters and histograms need the brackets (their increase is the window's).
            during = _delta.compute(self.dialect, inner, self._model, per_replica=False).get((), {})
            for name, sdef in signals_for(self.dialect).items():
                if sdef.op in GAUGE_OPS and name in during:
                    signals[name] = during[name].model_copy(update={"window_s": window})
        else:
            # Only the idle brackets: a gauge's "zero running" would be a reading of no load, not of this one.
            for name, sdef in signals_for(self.dialect).items():
                if sdef.op in GAUGE_OPS and name in signals and signals[name].present:
                    signals[name] = signals[name].model_copy(update={"value": None, "missing": NOT_SAMPLED})
        _missing.fill(signals, self.dialect.engine, None, window)
        return signals
