"""PromptSizer against the real engine's /tokenize (vLLM CPU, the tiny model's byte-level BPE).

Stated tolerance: every prompt within TOLERANCE_TOKENS (2) of its target; on this tokenizer we
expect, and assert, every prompt exact. The engine's own usage.prompt_tokens must agree with the
/tokenize count, and prompts of one prefix group must hit the engine's prefix cache while
unrelated prompts do not."""

import re
import time

import httpx
import pytest

from advisor.workload.plan import PlannedRequest, plan
from advisor.workload.prompts import TOLERANCE_TOKENS, PromptSizer
from advisor.workload.spec import Workload

pytestmark = pytest.mark.timeout(600)
MODEL = "tiny-llama"
BLOCK = 128  # vLLM's CPU KV block size (cache_config_info block_size in the captures)


def count(url: str, text: str) -> int:
    r = httpx.post(f"{url}/tokenize", json={"model": MODEL, "prompt": text}, timeout=30)
    r.raise_for_status()
    return r.json()["count"]


def test_prompts_have_their_sizes_in_the_engines_tokens(local_engine):
    url = local_engine.url
    w = Workload.model_validate({
        "buckets": [{"prompt_tokens": [1, 40], "output_tokens": 1}, {"prompt_tokens": [41, 500], "output_tokens": 1},
                    {"prompt_tokens": [501, 2000], "output_tokens": 1}],
        "arrival": {"kind": "poisson", "rate": 5}, "requests": 150, "seed": 5})
    reqs = plan(w)
    sizer = PromptSizer.for_target(url, MODEL)
    prompts = sizer.prompts_for(reqs, w)
    errors = [count(url, prompts[r.index]) - r.prompt_tokens for r in reqs]
    print(f"\n/tokenize calls by the sizer: {sizer.calls} for {len(reqs)} prompts; "
          f"max |error| {max(map(abs, errors))} tokens; exact {sum(e == 0 for e in errors)}/{len(errors)}")
    assert max(map(abs, errors)) <= TOLERANCE_TOKENS
    assert errors == [0] * len(errors), "the tiny model's BPE splits at spaces: sizes should be exact"
    assert sizer.stats.max_abs_error == 0 and sizer.calls <= len(reqs) + 20
    # What /tokenize counts is what the engine bills.
    for r in reqs[:4]:
        body = {"model": MODEL, "prompt": prompts[r.index], "max_tokens": 1}
        usage = httpx.post(f"{url}/v1/completions", json=body, timeout=120).json()["usage"]
        assert usage["prompt_tokens"] == r.prompt_tokens


def prefix_hits(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(float(v) for v in re.findall(r"^vllm:prefix_cache_hits_total\{[^}]*\} (\S+)$", text, re.M))


def send(url: str, prompt: str) -> float:
    """Send one prompt; the prefix-cache tokens it hit."""
    before = prefix_hits(url)
    r = httpx.post(f"{url}/v1/completions", json={"model": MODEL, "prompt": prompt, "max_tokens": 1}, timeout=120)
    r.raise_for_status()
    for _ in range(20):  # the counter is updated right after the response, but give it a moment
        hit = prefix_hits(url) - before
        if hit:
            return hit
        time.sleep(0.1)
    return 0.0


def test_prefix_groups_hit_the_cache_and_unrelated_prompts_do_not(local_engine):
    url = local_engine.url
    w = Workload.model_validate({
        "buckets": [{"prompt_tokens": [600, 700], "output_tokens": 1}],
        "prefix": {"groups": 2, "tokens": 2 * BLOCK, "share": 1.0},
        "arrival": {"kind": "constant", "rate": 1}, "requests": 5, "seed": 9})
    reqs = [PlannedRequest(i, float(i), "b", 650, 1, g, None) for i, g in enumerate([0, 0, None, None, 1])]
    # A fresh salt: nothing an earlier run left in the engine's cache can match.
    prompts = PromptSizer.for_target(url, MODEL).prompts_for(reqs, w, salt=str(time.time_ns()))
    hits = [send(url, prompts[r.index]) for r in reqs]
    print(f"\nprefix-cache tokens hit per request: {hits}")
    assert hits[0] == 0, "the group's first request finds nothing cached"
    assert hits[1] == 2 * BLOCK, "the second one hits exactly the shared prefix's two blocks"
    assert hits[2] == hits[3] == 0, "unrelated prompts share no block with anything"
    assert hits[4] == 0, "another group's prefix is different text"


def test_sampled_verification_on_the_real_tokenizer(local_engine):
    """verify="sample" counts about one prompt in ten once predictions prove exact; every prompt,
    counted afterwards by the test, must still be within the tolerance."""
    url = local_engine.url
    w = Workload.model_validate({
        "buckets": [{"prompt_tokens": [300, 1500], "output_tokens": 1}],
        "prefix": {"groups": 4, "tokens": 200, "share": 0.5},
        "arrival": {"kind": "poisson", "rate": 5}, "requests": 400, "seed": 6})
    reqs = plan(w)
    sizer = PromptSizer.for_target(url, MODEL, verify="sample")
    prompts = sizer.prompts_for(reqs, w)
    errors = [count(url, prompts[r.index]) - r.prompt_tokens for r in reqs]
    print(f"\nverify=sample: {sizer.calls} /tokenize calls for {len(reqs)} prompts "
          f"({sizer.stats.unverified} trusted); max |error| {max(map(abs, errors))}")
    assert max(map(abs, errors)) <= TOLERANCE_TOKENS
    assert sizer.calls < len(reqs) / 3
