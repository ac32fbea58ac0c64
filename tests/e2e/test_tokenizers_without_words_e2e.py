"""Prompt sizing and the load generator against real engines whose tokenizers have no whole-word
tokens: the tiny model's twins built at set-up (scripts/build_tiny_model.py --tokenizer), one that
merges at most two characters (every word of three or more letters split into pieces) and one with
one token per character. Each is served by the real CPU vLLM; counts come from its /tokenize."""

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from advisor.localstack import paths
from advisor.localstack.engine import LocalEngine
from advisor.localstack.traffic import drive_sync
from advisor.workload.plan import plan
from advisor.workload.prompts import TOLERANCE_TOKENS, WORDS, PromptSizer
from advisor.workload.spec import Workload
from tests.e2e.conftest import settle

pytestmark = pytest.mark.timeout(600)
ROOT = Path(__file__).resolve().parents[2]


def count(url: str, model: str, text: str) -> int:
    r = httpx.post(f"{url}/tokenize", json={"model": model, "prompt": text}, timeout=30)
    r.raise_for_status()
    return r.json()["count"]


def one_token_words(url: str, model: str) -> int:
    head = count(url, model, "the")
    return sum(count(url, model, "the " + w) - head == 1 for w in WORDS[:40])


def test_a_character_vocabulary_gets_prompts_of_their_sizes():
    with LocalEngine(model=paths.tiny_model_dir("chars"), served_model_name="tiny-chars") as engine:
        url = engine.url
        assert one_token_words(url, "tiny-chars") <= 1, "a character vocabulary has no multi-letter tokens"
        w = Workload.model_validate({
            "buckets": [{"prompt_tokens": [8, 60], "output_tokens": 1}, {"prompt_tokens": [200, 900], "output_tokens": 1}],
            "prefix": {"groups": 2, "tokens": 40, "share": 0.5},
            "arrival": {"kind": "poisson", "rate": 5}, "requests": 60, "seed": 4})
        reqs = plan(w)
        sizer = PromptSizer.for_target(url, "tiny-chars")
        prompts = sizer.prompts_for(reqs, w)
        errors = [count(url, "tiny-chars", prompts[r.index]) - r.prompt_tokens for r in reqs]
        print(f"\ncharacter vocabulary: {sizer.report()}; max |error| {max(map(abs, errors))}")
        assert max(map(abs, errors)) <= TOLERANCE_TOKENS
        assert sizer.report()["units"] == ["pieces"]
        assert len(set(prompts.values())) == len(prompts)
        # The engine bills what /tokenize counts.
        body = {"model": "tiny-chars", "prompt": prompts[reqs[0].index], "max_tokens": 1}
        usage = httpx.post(f"{url}/v1/completions", json=body, timeout=120).json()["usage"]
        assert abs(usage["prompt_tokens"] - reqs[0].prompt_tokens) <= TOLERANCE_TOKENS


def test_advisor_load_from_prometheus_runs_against_a_tokenizer_that_splits_every_word(local_prometheus):
    with LocalEngine(model=paths.tiny_model_dir("pieces"), served_model_name="tiny-pieces") as engine:
        url = engine.url
        assert one_token_words(url, "tiny-pieces") <= 2, "the pieces tokenizer splits common words"
        prom = local_prometheus([engine.target])
        prom.wait_scraped()  # CI once drove the whole burst before the first scrape: no growth to read
        # Traffic for the workload to be read from: the engine's own length histograms and rate.
        traffic = drive_sync(url, model="tiny-pieces", requests=24, concurrency=4, prompt_words=60, max_tokens=8)
        assert traffic.ok == 24, traffic.first_error
        settle(prom)
        argv = [sys.executable, "-m", "advisor.cli", "load", "--target", url, "--from-prom", prom.url,
                "--window", "5m", "--duration", "15s", "--output", "json"]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=240, cwd=ROOT, check=False)
        assert p.returncode == 0, p.stderr[-2000:] + p.stdout[-2000:]
        out = json.loads(p.stdout)
        sizing = out["manifest"]["prompt_sizing"]
        print(f"\nadvisor load --from-prom on the pieces tokenizer: {out['overall']['requests']} requests, "
              f"{out['overall']['ok']} ok; sizing {sizing}; generator {out['generator']}")
        assert sizing["units"] == ["pieces"] and sizing["counted_by"].startswith(url)
        assert sizing["prompts"] > 0 and sizing["misses"] == 0 and sizing["max_abs_error"] <= TOLERANCE_TOKENS
        assert out["overall"]["ok"] == out["overall"]["requests"] > 0
        assert out["manifest"]["model"] == "tiny-pieces"
