"""A small, bounded load driver for the local engine: streamed completions at fixed output length.

Not the experiment load generator: it only makes the engine busy enough to show a symptom.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx

from advisor.loadgen.loop import run_load
from advisor.localstack.paths import SERVED_MODEL_NAME

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
# The tiny model's tokenizer was trained on these words (scripts/build_tiny_model.py),
# so one word is about one token and prompt sizes stay predictable.
WORDS = (
    "the model serves tokens queue latency cache prefix batch decode prefill request gpu memory "
    "throughput scheduler kernel attention a of and to in is for on with as by at from it"
).split()


@dataclass
class DriveResult:
    requests: int
    ok: int = 0
    errors: int = 0
    elapsed_s: float = 0.0
    ttft_s: list[float] = field(default_factory=list)
    first_error: str | None = None

    def _fail(self, why: str) -> None:
        self.errors += 1
        self.first_error = self.first_error or why


def _prompts(words: int, shared: int, seed: int) -> Iterator[str]:
    """Endless prompts: the first `shared` words are the same for all, the rest fresh per request."""
    rng = random.Random(seed)
    prefix = [rng.choice(WORDS) for _ in range(min(shared, words))]
    while True:
        yield " ".join(prefix + [rng.choice(WORDS) for _ in range(words - len(prefix))])


async def _one(client: httpx.AsyncClient, url: str, body: dict, result: DriveResult) -> None:
    sent = time.monotonic()
    first = None
    try:
        async with client.stream("POST", f"{url}/v1/completions", json=body) as r:
            if r.status_code != 200:
                await r.aread()
                return result._fail(f"HTTP {r.status_code}: {r.text[:200]}")
            done = False
            async for line in r.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    return result._fail(f"stream error: {chunk['error']}")
                if first is None and chunk.get("choices"):
                    first = time.monotonic()
            if not done:
                return result._fail("stream ended without [DONE]")
    except (httpx.HTTPError, json.JSONDecodeError) as e:
        return result._fail(f"{type(e).__name__}: {e}")
    result.ok += 1
    if first is not None:
        result.ttft_s.append(first - sent)


async def drive(
    url: str,
    model: str = SERVED_MODEL_NAME,
    requests: int = 16,
    concurrency: int = 8,
    prompt_words: int = 200,
    max_tokens: int = 32,
    shared_prefix_words: int = 0,
    seed: int = 0,
    duration_s: float | None = None,
    request_timeout: float = 120.0,
    total_timeout: float = 600.0,
) -> DriveResult:
    """Send up to `requests` streamed completions, `concurrency` at a time, to an engine on this machine.

    With `duration_s`, no request starts after that many seconds (those in flight finish).
    Requests still running at `total_timeout` are cancelled and counted as errors.
    """
    host = urlsplit(url).hostname
    if host not in LOOPBACK:
        raise ValueError(f"drive() only sends load to this machine (127.0.0.1), not to {host!r}")
    url = url.rstrip("/")
    result = DriveResult(requests=0)
    prompts = _prompts(prompt_words, shared_prefix_words, seed)
    started = time.monotonic()

    async def worker(client: httpx.AsyncClient) -> None:
        while result.requests < requests and (duration_s is None or time.monotonic() - started < duration_s):
            result.requests += 1
            body = {
                "model": model, "prompt": next(prompts), "max_tokens": max_tokens, "stream": True,
                # Fixed output length, so every run does the same decode work.
                "ignore_eos": True, "temperature": 0.0,
            }
            try:
                await _one(client, url, body, result)
            except asyncio.CancelledError:
                result._fail(f"cut at the {total_timeout:.0f} s limit")
                raise
            except Exception as e:  # an odd reply costs one request, not the rest of the run
                result._fail(f"{type(e).__name__}: {e}")

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=request_timeout, limits=limits) as client:
        workers = [asyncio.ensure_future(worker(client)) for _ in range(concurrency)]
        _, pending = await asyncio.wait(workers, timeout=total_timeout)
        for w in pending:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    result.elapsed_s = time.monotonic() - started
    return result


def drive_sync(url: str, **kwargs) -> DriveResult:
    """drive() for callers without an event loop (threads, scripts)."""
    return run_load(drive(url, **kwargs))
