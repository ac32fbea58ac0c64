"""The load generator against the real CPU vLLM: what the client sent and saw must agree with what
the engine counted. Each test reads the engine's /metrics before and after its own load and asserts
on the difference (the `local_engine` fixture is shared, so absolute values mean nothing).

Stated bounds:
- shared prefix: prefix-cache hits >= HIT_FRACTION (0.5) of the shared-prefix tokens sent, and at
  most the shared tokens of every request but the first of its group (a fresh salt makes each run's
  prefixes new text, so the first request of a group has nothing to hit, and the nonce after the
  prefix ends every match there). Without a prefix: exactly 0 hits (the engine counts hits in whole
  128-token blocks, and unrelated prompts differ within their first few tokens).
- cancellations: every request the client cancelled got its first token from the engine, none of
  them finished (stop/length/error deltas exactly 0), the engine stopped decoding them (generation
  tokens <= GEN_FRACTION, 10%, of those requested; without the abort it would be 100%), and
  `finished_reason="abort"` rose by exactly the cancelled count or, as in vLLM 0.32.0, by exactly 0:
  its output processor drops a client-aborted request without recording finished-request stats
  (vllm-project/vllm#31503, #55634), so that counter never moves for client disconnects.
- TTFT: the client clock starts before the engine's (HTTP parse, tokenization) and stops after it
  (detokenization, SSE framing, loopback), so every client TTFT is >= the engine's for the same
  request, and at most OVERHEAD_S (50 ms) above it. Order statistics keep both inequalities, so the
  client p50 lies between the lower edge of the histogram bucket holding the engine's median sample
  and the upper edge of that bucket, widened by OVERHEAD_S. (Where the client has no TTFT for k
  requests - see test_empty_text_tokens_are_tokens - the upper rank moves up by k.) The interpolated
  engine p50 is printed beside it; it is off the true one by at most the bucket's width.

Cores: vLLM's CPU backend pins its worker's OpenMP threads to all cores but one and leaves the
engine-core process unpinned; while it decodes, that process busy-polls the worker and takes the
remaining core. On a 2-core machine, measured: a process pinned to the other core, even one that
never sleeps, got no CPU at all for the whole of an 1800-token decode (3 s; /proc/stat: both cores
100% user, steal 0). A load generator starved like that sends late, cancels late (the engine then
finishes the request) and sees tokens late. So LocalEngine starts every engine with the engine core
on the worker's cores and the API server on the rest (advisor/cores.py), and the load generator runs
beside the API server. The engine decodes slower then (3.4 s -> 4.5 s for 1800 tokens); nothing here
asserts engine speed.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import httpx
import numpy as np
import pytest
import yaml

from advisor.diagnosis.slo import SLO
from advisor.loadgen.metrics import summarize
from advisor.loadgen.runner import Run, Target, run
from advisor.workload.plan import PlannedRequest, plan
from advisor.workload.prompts import PromptSizer
from advisor.workload.spec import Workload
from probes.exposition import Scrape, bucket_quantile, parse
from tests.support.servers import ROOT

pytestmark = pytest.mark.timeout(240)
MODEL = "tiny-llama"
BLOCK = 128  # vLLM's CPU KV block size (cache_config_info block_size)
PREFIX_TOKENS = 4 * BLOCK
HIT_FRACTION = 0.5
GEN_FRACTION = 0.1
OVERHEAD_S = 0.050
TTFT = "vllm:time_to_first_token_seconds"
PAD_TOKEN_ID = 3  # the tiny model's <pad>: a special token, streamed as "" text


# --- the engine's counters -------------------------------------------------------------------

def scrape(url: str) -> Scrape:
    r = httpx.get(f"{url}/metrics", timeout=10)
    r.raise_for_status()
    return parse(r.text, time.monotonic())


def total(s: Scrape, name: str, **labels: str) -> float:
    return sum(v for lab, v in s.series(name).items() if all(dict(lab).get(k) == x for k, x in labels.items()))


def delta(a: Scrape, b: Scrape, name: str, **labels: str) -> float:
    return total(b, name, **labels) - total(a, name, **labels)


def bucket_deltas(a: Scrape, b: Scrape, name: str) -> list[tuple[float, float]]:
    """(le, cumulative count) of the observations made between scrapes a and b."""
    les = {dict(lab)["le"] for lab in b.series(f"{name}_bucket")}
    return sorted((float(le), delta(a, b, f"{name}_bucket", le=le)) for le in les)


def bucket_of(buckets: list[tuple[float, float]], rank: int) -> tuple[float, float]:
    """(lo, hi]: the bucket that holds the rank-th smallest observation (1-based)."""
    i = next(k for k, (_, c) in enumerate(buckets) if c >= rank)
    return (0.0 if i == 0 else buckets[i - 1][0]), buckets[i][0]


def settled(url: str, before: Scrape, first_tokens: int, timeout: float = 30) -> Scrape:
    """The engine's counters once it is idle and has recorded `first_tokens` more first tokens."""
    deadline = time.monotonic() + timeout
    while True:
        s = scrape(url)
        busy = total(s, "vllm:num_requests_running") + total(s, "vllm:num_requests_waiting")
        if (busy == 0 and delta(before, s, f"{TTFT}_count") >= first_tokens) or time.monotonic() > deadline:
            return s
        time.sleep(0.2)


# --- driving load ----------------------------------------------------------------------------

def workload(**spec) -> Workload:
    return Workload.model_validate(spec)


def drive(engine, w: Workload, target: Target | None = None) -> tuple[list[PlannedRequest], Run, Scrape, Scrape]:
    """Plan, size (fresh salt: nothing earlier runs cached can match), send; scrape around the load."""
    url = engine.url
    reqs = plan(w)
    prompts = PromptSizer.for_target(url, MODEL).prompts_for(reqs, w, salt=str(time.time_ns()))
    before = scrape(url)
    r = asyncio.run(run(target or Target(url, MODEL), reqs, prompts))
    after = settled(url, before, sum(rec.status in ("ok", "cancelled") for rec in r.records))
    return reqs, r, before, after


# --- the tests -------------------------------------------------------------------------------

def test_shared_prefixes_hit_the_engines_prefix_cache_and_unrelated_prompts_do_not(local_engine):
    common = {"buckets": [{"prompt_tokens": [700, 800], "output_tokens": 4}],
              "arrival": {"kind": "constant", "rate": 2}, "requests": 16}
    shared = workload(**common, prefix={"groups": 2, "tokens": PREFIX_TOKENS, "share": 0.9}, seed=11)
    reqs, r, a, b = drive(local_engine, shared)
    assert all(rec.status == "ok" for rec in r.records), [rec.error for rec in r.records if rec.error]
    carriers = [q for q in reqs if q.prefix_group is not None]
    groups = {q.prefix_group for q in carriers}
    shared_sent = PREFIX_TOKENS * len(carriers)
    hittable = PREFIX_TOKENS * (len(carriers) - len(groups))
    hits = delta(a, b, "vllm:prefix_cache_hits_total")
    queried = delta(a, b, "vllm:prefix_cache_queries_total")
    sent = sum(q.prompt_tokens for q in reqs)
    print(f"\nshared prefix: {len(carriers)}/{len(reqs)} requests in {len(groups)} groups carry "
          f"{shared_sent} shared tokens ({hittable} hittable); engine hits {hits:.0f} "
          f"({hits / shared_sent:.0%} of shared), queried {queried:.0f} of {sent} prompt tokens sent")
    assert queried == sent, "the engine looks up every prompt token once (prompts sized exactly)"
    assert hits % BLOCK == 0
    assert HIT_FRACTION * shared_sent <= hits <= hittable

    plain = workload(**common, seed=12)
    reqs, r, a, b = drive(local_engine, plain)
    assert all(rec.status == "ok" for rec in r.records), [rec.error for rec in r.records if rec.error]
    hits = delta(a, b, "vllm:prefix_cache_hits_total")
    queried = delta(a, b, "vllm:prefix_cache_queries_total")
    print(f"no prefix: engine hits {hits:.0f} over {queried:.0f} tokens queried")
    assert queried == sum(q.prompt_tokens for q in reqs)
    assert hits == 0


def test_cancelled_requests_stop_in_the_engine_and_are_counted_as_it_counts_aborts(local_engine):
    w = workload(buckets=[{"prompt_tokens": [50, 100], "output_tokens": [1500, 1800]}],
                 cancellation={"rate": 1.0, "after_tokens": [2, 4]},
                 arrival={"kind": "constant", "rate": 1}, requests=8, seed=13)
    reqs, r, a, b = drive(local_engine, w)
    cancelled = [rec for rec in r.records if rec.status == "cancelled"]
    planned = [q for q in reqs if q.cancel_after_tokens is not None]
    aborts = delta(a, b, "vllm:request_success_total", finished_reason="abort")
    finished = {reason: delta(a, b, "vllm:request_success_total", finished_reason=reason)
                for reason in ("stop", "length", "error")}
    generated = delta(a, b, "vllm:generation_tokens_total")
    asked = sum(q.output_tokens for q in reqs)
    print(f"\ncancelled by the client: {len(cancelled)}/{len(planned)} planned (after "
          f"{[len(rec.chunk_s) for rec in cancelled]} tokens); engine: abort +{aborts:.0f}, finished "
          f"{finished}, first tokens +{delta(a, b, f'{TTFT}_count'):.0f}, generated {generated:.0f} "
          f"of {asked} tokens asked ({generated / asked:.1%}); client lag p99 "
          f"{summarize(r).generator.lag_p99_s * 1000:.0f} ms")
    assert len(planned) == len(reqs) and len(cancelled) == len(planned), [rec.status for rec in r.records]
    assert delta(a, b, f"{TTFT}_count") == len(cancelled), "each got its first token from the engine"
    assert delta(a, b, "vllm:prompt_tokens_total") == sum(q.prompt_tokens for q in reqs)
    assert finished == {"stop": 0, "length": 0, "error": 0}, "a cancelled request never finishes"
    assert generated <= GEN_FRACTION * asked, "the engine stopped decoding the cancelled requests"
    assert aborts in (0, len(cancelled)), "vLLM counts client aborts all (fixed versions) or none (0.32.0)"


def test_client_ttft_agrees_with_the_engines_histogram(local_engine):
    n = 21
    w = workload(buckets=[{"prompt_tokens": [700, 800], "output_tokens": 8}],
                 arrival={"kind": "constant", "rate": 2}, requests=n, seed=14)
    _, r, a, b = drive(local_engine, w)
    assert all(rec.status == "ok" for rec in r.records), [rec.error for rec in r.records if rec.error]
    client = sorted(rec.ttft for rec in r.records if rec.ttft is not None)
    buckets = bucket_deltas(a, b, TTFT)
    assert buckets[-1][1] == n, "the engine recorded a first token for every request, and only those"
    m, k = len(client), n - len(client)  # k: served, but the client saw no text (see the xfail below)
    client_p50 = float(np.median(client))  # the mean of client[(m-1)//2] and client[m//2]
    lo, _ = bucket_of(buckets, (m - 1) // 2 + 1)
    _, hi = bucket_of(buckets, m // 2 + 1 + k)
    interpolated, note = bucket_quantile(0.5, buckets)
    print(f"\nTTFT p50: client {client_p50 * 1000:.1f} ms over {m} requests; engine histogram "
          f"{interpolated * 1000:.1f} ms interpolated{f' ({note})' if note else ''} over {n}; "
          f"bound ({lo * 1000:g}, {hi * 1000:g}] ms + {OVERHEAD_S * 1000:g} ms; client range "
          f"{client[0] * 1000:.1f}-{client[-1] * 1000:.1f} ms")
    assert lo <= client_p50 <= hi + OVERHEAD_S


def test_advisor_load_cli_reports_every_bucket_with_a_valid_generator(local_engine, tmp_path):
    spec = {"name": "e2e-two-buckets",
            "buckets": [{"name": "short", "prompt_tokens": [100, 200], "output_tokens": [16, 32]},
                        {"name": "long", "prompt_tokens": [600, 800], "output_tokens": [32, 48]}],
            "arrival": {"kind": "poisson", "rate": 1.5}, "duration_s": 60, "seed": 15}
    path = tmp_path / "workload.yaml"
    path.write_text(yaml.safe_dump(spec))
    url = local_engine.url
    argv = [sys.executable, "-m", "advisor.cli", "load", "--target", url, "--workload", str(path),
            "--duration", "15s", "--output", "json"]
    before = scrape(url)
    p = subprocess.run(argv, capture_output=True, text=True, timeout=150, cwd=ROOT, check=False)
    assert p.returncode == 0, p.stderr[-2000:] + p.stdout[-2000:]
    out = json.loads(p.stdout)
    overall = out["overall"]
    after = settled(url, before, overall["ok"])
    g = out["generator"]
    print(f"\nadvisor load: {overall['requests']} requests ({overall['ttft']['n']} with a client TTFT), "
          f"generator {g}")
    assert out["manifest"]["generator_valid"] is True
    assert g["valid"] is True and g["why_invalid"] is None
    assert g["achieved_ratio"] >= 0.95 and g["lag_p99_s"] <= 0.050
    assert set(out["buckets"]) == {"short", "long"}
    for name, stats in out["buckets"].items():
        assert stats["ok"] == stats["requests"] > 0, (name, stats)
        for metric in ("ttft", "tpot", "itl", "e2e"):
            d = stats[metric]
            assert d["n"] > 0 and 0 < d["p50"] <= d["p99"], (name, metric, d)
    assert overall["requests"] == sum(s["requests"] for s in out["buckets"].values())
    # What the client measured is what the engine served.
    assert delta(before, after, "vllm:request_success_total", finished_reason="length") == overall["ok"]
    assert delta(before, after, f"{TTFT}_count") == overall["ok"]
    produced = overall["output_tokens"]["mean"] * overall["output_tokens"]["n"]
    assert delta(before, after, "vllm:generation_tokens_total") == pytest.approx(produced, abs=0.5)


def test_empty_text_tokens_are_tokens(local_engine):
    """Deterministic: a logit bias makes the engine emit only <pad>, which streams as ''. On the
    tiny model this also happens unforced: ~3% of greedy 8-token outputs are all '' and ~6% start
    with '' (measured over 168 prompts)."""
    url = local_engine.url
    w = workload(buckets=[{"prompt_tokens": 64, "output_tokens": 6}], arrival={"kind": "constant", "rate": 4},
                 requests=2, seed=16)
    reqs = plan(w)
    reqs[1] = PlannedRequest(1, reqs[1].at_s, reqs[1].bucket, 64, 6, None, 2)  # cancel after 2 tokens
    prompts = PromptSizer.for_target(url, MODEL).prompts_for(reqs, w, salt=str(time.time_ns()))
    target = Target(url, MODEL, extra_body={"logit_bias": {str(PAD_TOKEN_ID): 100}})
    before = scrape(url)
    r = asyncio.run(run(target, reqs, prompts))
    after = settled(url, before, 2)
    whole, cancel = r.records
    print(f"\nall-'' streams: statuses {[x.status for x in r.records]}, ttft {[x.ttft for x in r.records]}, "
          f"chunks {[len(x.chunk_s) for x in r.records]}; engine first tokens "
          f"+{delta(before, after, f'{TTFT}_count'):.0f}, finished length "
          f"+{delta(before, after, 'vllm:request_success_total', finished_reason='length'):.0f}")
    assert delta(before, after, f"{TTFT}_count") == 2, "the engine did stream tokens"
    impossible = SLO(ttft_p95=1e-9, tpot_p95=1e-9, e2e_p99=1e-9)
    assert summarize(r, slo=impossible).overall.goodput_rps == 0, "no request can meet a 1 ns SLO"
    assert whole.status == "ok" and whole.ttft is not None and whole.e2e is not None
    assert len(whole.chunk_s) == whole.output_tokens == 6
    assert cancel.status == "cancelled"
