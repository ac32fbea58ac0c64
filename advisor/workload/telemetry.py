"""A workload shaped like the deployment's own traffic, read from its Prometheus.

- Lengths: the engine's prompt and generation length histograms, as bucket increases over the
  window. The histograms carry no joint distribution, so prompt and output lengths are drawn as
  independent marginals (said in Workload.source). Within each histogram bucket the lengths sit at
  one common relative position, chosen so that the mean matches the histogram's _sum / _count.
- Prefix sharing: the prefix-cache hit rate (tokens hit / tokens looked up) H says that on average
  H x mean prompt tokens per request came from the cache; we give a share s of requests one shared
  prefix of P tokens with s x P = H x mean prompt, P as long as the shortest prompt allows.
- Arrivals: the request count over the window gives the rate. Burstiness comes from the counts per
  minute: for a renewal process their variance / mean tends to the squared CV of the inter-arrival
  gaps, so gamma shape k = mean / variance (Poisson: 1). The engines record a request when it
  finishes, and a queue smooths finishes, so this reads burstiness low, never high.

Metric names come from the probes' dialect catalog: any engine whose dialect maps prompt_len and
output_len works.
"""

from __future__ import annotations

import math
import statistics
import time
from datetime import datetime

from advisor import net
from advisor.ranges import RATE_MAX
from advisor.workload.spec import Arrival, Bucket, Prefix, Workload, WorkloadError
from probes.catalog import Dialect, detect_engines, dialects
from probes.errors import ProbeError
from probes.http import HttpConfig
from probes.prometheus import PrometheusClient, duration, selector

MINUTE_S = 60
# Fewer whole minutes than this and the variance of the counts says too little: Poisson.
MIN_MINUTES = 10
SHAPE_LIMITS = (0.05, 20.0)


def _dialect(client: PrometheusClient) -> tuple[Dialect, set[str]]:
    available = client.metric_names()
    usable = [e for e in detect_engines(available)
              if all(dialects()[e].resolve(k, available) for k in ("prompt_len", "output_len"))]
    if not usable:
        mapped = sorted(k for k, d in dialects().items() if "prompt_len" in d.metrics)
        raise WorkloadError(f"Prometheus at {client.url} holds no prompt and output length histograms of a "
                            f"known engine ({', '.join(mapped)}); cannot shape a workload from it")
    return dialects()[usable[0]], available


def _scalar(client: PrometheusClient, q: str, at: datetime | None) -> float | None:
    rows = client.query(q, at)
    try:
        v = float(rows[0]["value"][1])
    except (IndexError, KeyError, TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _intervals(rows: list[dict]) -> list[tuple[int, float, float]]:
    """(lowest length, highest length or inf, count) per non-empty histogram bucket."""
    cum = sorted((float(r["metric"]["le"]), max(0.0, float(r["value"][1]))) for r in rows if "le" in r.get("metric", {}))
    out, prev_le, prev_c, carry = [], 0.0, 0.0, 0.0
    for le, c in cum:
        n = max(0.0, c - prev_c) + carry
        lo, hi = math.floor(prev_le) + 1, (math.inf if math.isinf(le) else math.floor(le))
        if hi < lo:  # a bucket narrower than one token: its count joins the next one
            carry = n
        else:
            carry = 0.0
            if n > 0:
                out.append((lo, hi, n))
            prev_le = le
        prev_c = max(prev_c, c)
    return out


def _ranges(intervals: list[tuple[int, float, float]], mean: float | None) -> list[tuple[tuple[int, int], float]]:
    """Integer length ranges with weights; see the module docstring for the common position."""
    total = sum(n for *_, n in intervals)
    # The +Inf bucket has no upper edge: assume it reaches twice its lower one.
    spans = [(lo, hi if math.isfinite(hi) else 2 * lo, n / total) for lo, hi, n in intervals]
    width = sum(w * (hi - lo) for lo, hi, w in spans)
    f = 0.5 if mean is None or width == 0 else min(1.0, max(0.0, (mean - sum(w * lo for lo, _, w in spans)) / width))
    out = []
    for lo, hi, w in spans:
        c = lo + f * (hi - lo)
        half = min(c - lo, hi - c)
        out.append(((max(lo, round(c - half)), min(int(hi), max(lo, round(c + half)))), w))
    return out


def _lengths(client: PrometheusClient, name: str, sel: str, w: str, at: datetime | None):
    rows = client.query(f"sum by (le) (increase({name}_bucket{sel}[{w}]))", at)
    intervals = _intervals(rows)
    total = _scalar(client, f"sum(increase({name}_sum{sel}[{w}]))", at)
    count = _scalar(client, f"sum(increase({name}_count{sel}[{w}]))", at)
    mean = total / count if total is not None and count else None
    return intervals, mean


def _minute_counts(client: PrometheusClient, name: str, sel: str, w: str, at: datetime | None) -> tuple[list[float], float, float]:
    """Requests per whole minute, from the raw counter samples (no extrapolation), the total, and the span.

    An instant query over a range selector returns every stored sample, per series."""
    rows = client.query(f"{name}_count{sel}[{w}]", at)
    series = [[(float(t), float(v)) for t, v in r.get("values", [])] for r in rows]
    series = [s for s in series if len(s) >= 2]
    if not series:
        return [], 0.0, 0.0
    start, end = min(s[0][0] for s in series), max(s[-1][0] for s in series)
    bins = [0.0] * int((end - start) // MINUTE_S)
    total = 0.0
    for s in series:
        for (_, a), (t, b) in zip(s, s[1:]):
            inc = b - a if b >= a else b  # a counter reset restarts from zero
            total += inc
            i = int((t - start) // MINUTE_S)
            if i < len(bins):
                bins[i] += inc
    return bins, total, end - start


def _arrival(bins: list[float], rate: float) -> tuple[Arrival, str]:
    if len(bins) < MIN_MINUTES:
        return Arrival(kind="poisson", rate=rate), f"Poisson (only {len(bins)} whole minutes for burstiness)"
    mean, var = statistics.fmean(bins), statistics.variance(bins)
    idc = var / mean
    # The variance/mean of n Poisson counts has a standard error near sqrt(2 / (n - 1)).
    if abs(idc - 1) <= 2 * math.sqrt(2 / (len(bins) - 1)):
        return Arrival(kind="poisson", rate=rate), f"Poisson (per-minute variance/mean {idc:.2f} over {len(bins)} min)"
    k = min(SHAPE_LIMITS[1], max(SHAPE_LIMITS[0], 1 / idc)) if idc > 0 else SHAPE_LIMITS[1]
    return (Arrival(kind="gamma", rate=rate, burstiness=round(k, 4)),
            f"gamma k={k:.3g} (per-minute variance/mean {idc:.2f} over {len(bins)} min)")


def _prefix(client, dialect, available, model, w, at, buckets, prompt_mean) -> tuple[Prefix | None, str]:
    hits, queries = (dialect.resolve(k, available) for k in ("prefix_hits", "prefix_queries"))
    if not (hits and queries):
        return None, f"no prefix sharing: {dialect.engine} exports no prefix-cache counters here"
    h = _scalar(client, f"sum(increase({hits}{selector(dialect, 'prefix_hits', model)}[{w}]))", at)
    q = _scalar(client, f"sum(increase({queries}{selector(dialect, 'prefix_queries', model)}[{w}]))", at)
    if not q or h is None or h <= 0 or prompt_mean is None:
        return None, "no prefix sharing: no prefix-cache hits in the window"
    rate = min(1.0, h / q)
    longest = min(b.prompt_tokens[0] for b in buckets) - 1  # the spec wants every prompt to hold it
    if longest < 1:
        return None, f"prefix hit rate {rate:.2f} not reproduced: the shortest prompt cannot hold a prefix"
    share = min(1.0, rate * prompt_mean / longest)
    short = "" if share < 1 else f" (reaches only {longest / prompt_mean:.2f}: prefix capped by the shortest prompt)"
    return (Prefix(groups=1, tokens=longest, share=round(share, 6)),
            f"prefix hit rate {rate:.2f} -> {share:.0%} of requests share one {longest}-token prefix{short}")


def workload_from_prometheus(prom_url: str, window_s: float = 3600, model: str | None = None,
                             at: datetime | None = None, duration_s: float = 60, seed: int = 0,
                             timeout: float = 10.0, http: HttpConfig | None = None) -> Workload:
    """The deployment's traffic over the window ending at `at` (default now) as a Workload.
    http: TLS and credentials (default: the settings' for Prometheus, advisor/net.py); timeout:
    each query's total deadline."""
    client = PrometheusClient(prom_url, timeout, http or net.config("prom", url=prom_url))
    try:
        dialect, available = _dialect(client)
        w = duration(window_s)
        names = {k: dialect.resolve(k, available) for k in ("prompt_len", "output_len")}
        sels = {k: selector(dialect, k, model) for k in names}
        bins, count, span = _minute_counts(client, names["prompt_len"], sels["prompt_len"], w, at)
        where = f" for model {model!r}" if model else ""
        if count < 1 or span <= 0:
            raise WorkloadError(f"no traffic in the {w} window{where}: {names['prompt_len']} did not grow "
                                f"(Prometheus at {client.url}); pick a busier window or a workload file")
        shapes = {k: _lengths(client, names[k], sels[k], w, at) for k in names}
        if not all(iv for iv, _ in shapes.values()):
            raise WorkloadError(f"no traffic in the {w} window{where}: the length histograms are empty")
        prompt, output = (_ranges(*shapes[k]) for k in ("prompt_len", "output_len"))
        buckets = [Bucket(prompt_tokens=p, output_tokens=o, weight=wp * wo) for p, wp in prompt for o, wo in output]
        rate = count / span
        if rate > RATE_MAX:
            raise WorkloadError(f"{names['prompt_len']} grew by {rate:.3g} requests per second over the {w} window"
                                f"{where} (Prometheus at {client.url}): more than a workload can replay "
                                f"(at most {RATE_MAX:g}); not a rate to believe")
        arrival, how = _arrival(bins, rate)
        prefix, shared = _prefix(client, dialect, available, model, w, at, buckets, shapes["prompt_len"][1])
    except ProbeError as e:
        raise WorkloadError(f"cannot read the workload from Prometheus: {e}") from e
    finally:
        client.close()
    ended = (at.isoformat() if at else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    return Workload(
        name=f"telemetry {dialect.engine} {w}", model=model, buckets=buckets, prefix=prefix, arrival=arrival,
        duration_s=duration_s, seed=seed,
        source=(f"telemetry: Prometheus {client.url}, {dialect.engine} {names['prompt_len']} x "
                f"{names['output_len']} over {w} ending {ended}{where}; {count:.0f} requests, {rate:.3g} req/s; "
                f"prompt and output lengths drawn as independent marginals (the histograms hold no joint); "
                f"arrivals {how}; {shared}"),
    )
