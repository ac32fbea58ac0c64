"""workload_from_prometheus against a real Prometheus holding backfilled, synthetic vLLM series.

The series are made up here (they come from no engine): requests drawn with known length mixes
and arrival processes, folded into vLLM's metric names and histogram buckets. Three models:
steady Poisson traffic with a 10 % prefix-cache hit rate, bursty gamma traffic, and an idle one.

Tolerances: length-bucket weights within 0.01 of the synthetic requests' own shares (increase()
extrapolates every bucket series by the same factor, so shares are nearly exact); rate within 1 %
of the synthetic count (the raw samples are read, so only the window's edge scrapes differ);
the prefix hit rate reproduced within 2 %; gamma shape within a factor of 2 (the variance of 60
per-minute counts has a standard error near 20 %, and a gamma count is skewed)."""

import random
import time
from bisect import bisect_left
from datetime import datetime, timezone

import pytest

from advisor.localstack import backfill
from advisor.workload.spec import WorkloadError
from advisor.workload.telemetry import workload_from_prometheus

# One worker runs the whole module (scripts/test.sh: --dist loadfile), so its server starts once.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

LE = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000]  # vLLM's 1-2-5 buckets up to max_model_len 2048
STEP = 15
PROMPTS = [(80, 0.5), (300, 0.3), (1500, 0.2)]
OUTPUTS = [(30, 0.7), (150, 0.3)]
HIT_RATE = 0.10


def draw(rng, mix):
    return rng.choices([v for v, _ in mix], [w for _, w in mix])[0]


def arrivals(rng, start, end, rate, shape):
    t, out = start, []
    while True:
        t += rng.gammavariate(shape, 1 / (rate * shape))
        if t >= end:
            return out
        out.append((t, draw(rng, PROMPTS), draw(rng, OUTPUTS)))


def histogram(name, labels, reqs, times, index):
    lines = [f"# TYPE {name} histogram"]
    for ts in times:
        done = reqs[: bisect_left([r[0] for r in reqs], ts + 1e-9)] if reqs else []
        vals = [r[index] for r in done]
        for le in LE:
            lines.append(f'{name}_bucket{{{labels},le="{le}.0"}} {sum(v <= le for v in vals)} {ts}')
        lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {len(vals)} {ts}')
        lines.append(f"{name}_count{{{labels}}} {len(vals)} {ts}")
        lines.append(f"{name}_sum{{{labels}}} {sum(vals)} {ts}")
    return lines


def synthetic_openmetrics(start: int, end: int, models: dict) -> str:
    times = list(range(start, end + 1, STEP))
    fam = {"prompt": [], "gen": [], "running": [], "hits": [], "queries": []}
    for model, reqs in models.items():
        labels = f'engine="0",model_name="{model}"'
        fam["prompt"] += histogram("vllm:request_prompt_tokens", labels, reqs, times, 1)[1:]
        fam["gen"] += histogram("vllm:request_generation_tokens", labels, reqs, times, 2)[1:]
        fam["running"] += [f"vllm:num_requests_running{{{labels}}} 0 {ts}" for ts in times]
        cum = [0] * len(times)
        for t, p, _ in reqs:
            cum[bisect_left(times, t)] += p if bisect_left(times, t) < len(times) else 0
        total = 0
        for i, ts in enumerate(times):
            total += cum[i]
            fam["queries"].append(f"vllm:prefix_cache_queries_total{{{labels}}} {total} {ts}")
            fam["hits"].append(f"vllm:prefix_cache_hits_total{{{labels}}} {round(total * HIT_RATE)} {ts}")
    head = {"prompt": "# TYPE vllm:request_prompt_tokens histogram",
            "gen": "# TYPE vllm:request_generation_tokens histogram",
            "running": "# TYPE vllm:num_requests_running gauge",
            "hits": "# TYPE vllm:prefix_cache_hits counter",
            "queries": "# TYPE vllm:prefix_cache_queries counter"}
    out = []
    for k, lines in fam.items():
        out += [head[k]] + lines
    return "\n".join(out + ["# EOF"]) + "\n"


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    now = int(time.time())
    start, end = now - 100 * 60, now - 10 * 60  # within backfill's reach; 30 min before the window opens
    rng = random.Random(42)
    models = {
        "steady": arrivals(rng, start, end, rate=2.0, shape=1.0),
        "bursty": arrivals(rng, start, end, rate=2.0, shape=0.2),
        "idle": [],
    }
    data = tmp_path_factory.mktemp("prom") / "data"
    backfill(synthetic_openmetrics(start, end, models), data)
    return {"data": data, "end": end, "models": models}


@pytest.fixture(scope="module")
def prom(synthetic):
    from advisor.localstack import LocalPrometheus

    p = LocalPrometheus([], data_dir=synthetic["data"]).start()
    yield p
    p.stop()


def in_window(reqs, end, window):
    return [r for r in reqs if end - window < r[0] <= end]


def test_steady_traffic_shape(prom, synthetic):
    end = synthetic["end"]
    at = datetime.fromtimestamp(end, tz=timezone.utc)
    w = workload_from_prometheus(prom.url, window_s=3600, model="steady", at=at, duration_s=120, seed=3)
    reqs = in_window(synthetic["models"]["steady"], end, 3600)
    assert w.duration_s == 120 and w.seed == 3 and w.model == "steady"
    assert "independent marginals" in w.source and "vllm:request_prompt_tokens" in w.source
    # Marginal shares by vLLM bucket: 80 -> (50, 100], 300 -> (200, 500], 1500 -> (1000, 2000].
    for axis, mix, index in (("prompt_tokens", PROMPTS, 1), ("output_tokens", OUTPUTS, 2)):
        shares = {}
        for b in w.buckets:
            rng = getattr(b, axis)
            shares[rng] = shares.get(rng, 0) + b.weight
        assert len(shares) == len(mix)
        for value, _ in mix:
            (rng,) = [r for r in shares if LE[bisect_left(LE, value) - 1] < r[0] <= r[1] <= LE[bisect_left(LE, value)]]
            expected = sum(r[index] == value for r in reqs) / len(reqs)
            assert shares[rng] == pytest.approx(expected, abs=0.01), (axis, value)
    # The mean of the drawn lengths matches the histograms' _sum / _count.
    mean_prompt = sum(b.weight * (b.prompt_tokens[0] + b.prompt_tokens[1]) / 2 for b in w.buckets)
    assert mean_prompt == pytest.approx(sum(r[1] for r in reqs) / len(reqs), rel=0.02)
    assert w.arrival.rate == pytest.approx(len(reqs) / 3600, rel=0.01)
    assert w.arrival.kind == "poisson"
    reproduced = w.prefix.share * w.prefix.tokens / mean_prompt
    assert reproduced == pytest.approx(HIT_RATE, rel=0.02)


def test_bursty_traffic_gives_gamma(prom, synthetic):
    at = datetime.fromtimestamp(synthetic["end"], tz=timezone.utc)
    w = workload_from_prometheus(prom.url, window_s=3600, model="bursty", at=at)
    assert w.arrival.kind == "gamma"
    assert 0.1 <= w.arrival.burstiness <= 0.4, w.source  # drawn with shape 0.2
    assert "per-minute variance/mean" in w.source


def test_no_traffic_is_a_clear_error(prom, synthetic):
    at = datetime.fromtimestamp(synthetic["end"], tz=timezone.utc)
    for model in ("idle", "never-served"):
        with pytest.raises(WorkloadError, match=rf"no traffic in the 3600s window for model '{model}'"):
            workload_from_prometheus(prom.url, window_s=3600, model=model, at=at)
    # Before the backfilled history begins there is nothing at all.
    early = datetime.fromtimestamp(synthetic["end"] - 6 * 3600, tz=timezone.utc)
    with pytest.raises(WorkloadError, match="no traffic"):
        workload_from_prometheus(prom.url, window_s=600, at=early)


def test_not_an_engine_and_unreachable(local_prometheus, tmp_path):
    empty = local_prometheus([], data_dir=tmp_path / "empty")
    with pytest.raises(WorkloadError, match="no prompt and output length histograms of a known engine"):
        workload_from_prometheus(empty.url)
    with pytest.raises(WorkloadError, match="unreachable"):
        workload_from_prometheus("http://127.0.0.1:9", timeout=2)
