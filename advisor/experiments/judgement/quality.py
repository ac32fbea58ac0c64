"""The quality guard for mechanisms that change numerics (quantization, KV-cache dtype, speculative
decoding): both arms' greedy outputs, with their token log-probabilities, on a fixed set of prompts
shipped with the advisor (quality_prompts.txt), compared in one run.

The reference is the baseline arm's own output: there is no external truth for a model whose
weights may be random (the tiny local one) or private, and the question is "does the candidate
still say what the baseline says", not "is the baseline right". Two readouts:

- token agreement: the share of the baseline's tokens that the candidate reproduced before its
  first divergence (after it, the two continue different texts and positions no longer compare);
- log-likelihood difference: per prompt, the mean over those positions (and the divergence itself)
  of candidate - baseline log-probability of the baseline's token, in nats. At the divergence the
  candidate's log-probability of the baseline's token comes from its top-k; when the token is not
  among them, the k-th log-probability stands in (an upper bound, so the drop is if anything
  understated). The mean over prompts gets a 95% t interval.

The interval against -margin is this guard's reading ("within margin", "past margin", "unclear");
what it does to the experiment's verdict is the judgement's to say (advisor/experiments/judgement/judge.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path


from advisor import net
from advisor.errors import AdvisorError
from advisor.experiments.result import QualityGuard
from advisor.experiments.stats import scipy_stats
from probes.http import client as http_client
from probes.http import request
from concurrent.futures import ThreadPoolExecutor

MAX_TOKENS = 16
TOP_K = 5
# Nats per token: past this mean drop in the log-likelihood of the baseline's own tokens, the
# candidate says something else often enough to matter (a 10% lower probability per token).
MARGIN = 0.1
LEVEL = 0.95
CONCURRENCY = 4


def _load() -> list[str]:
    text = Path(__file__).with_name("quality_prompts.txt").read_text()
    return [line.replace("\\n", "\n") for line in text.splitlines() if line.strip() and not line.startswith("#")]


PROMPTS = _load()


@dataclass(frozen=True)
class Step:
    """One generated token: its identity (the engine's token id where it says), its log-probability
    (None: the engine gave none) and the top-k alternatives at that position."""
    key: str
    logprob: float | None = None
    top: dict[str, float] = field(default_factory=dict)


def steps(choice: dict) -> list[Step]:
    """A completion choice's tokens: llama.cpp's per-token `content` list (with ids), the OpenAI
    legacy `tokens` / `token_logprobs` / `top_logprobs` (vLLM returns ids as "token_id:N" when asked),
    else the text's characters without log-probabilities."""
    lp = choice.get("logprobs") or {}
    if isinstance(lp.get("content"), list):
        out = []
        for t in lp["content"]:
            key = f"id:{t['id']}" if "id" in t else str(t.get("token"))
            top = {(f"id:{x['id']}" if "id" in x else str(x.get("token"))): float(x["logprob"])
                   for x in t.get("top_logprobs") or [] if x.get("logprob") is not None}
            out.append(Step(key, None if t.get("logprob") is None else float(t["logprob"]), top))
        return out
    tokens = lp.get("tokens")
    if tokens:
        lps = lp.get("token_logprobs") or [None] * len(tokens)
        tops = lp.get("top_logprobs") or [None] * len(tokens)
        return [Step(str(k), None if v is None else float(v),
                     {str(a): float(b) for a, b in (t or {}).items() if b is not None})
                for k, v, t in zip(tokens, lps, tops)]
    return [Step(c) for c in str(choice.get("text", ""))]


def greedy(url: str, model: str, prompts: list[str] | None = None, max_tokens: int = MAX_TOKENS,
           top_k: int = TOP_K, timeout: float = 60.0, concurrency: int = CONCURRENCY) -> list[list[Step]]:
    """Each prompt's greedy completion as the engine's own tokens, in prompt order. A few in flight:
    one at a time would take minutes on a CPU engine; the arms are asked alike, and an A/A run shows
    what batching alone changes (nothing on llama.cpp and the tiny model here)."""

    # Each request within its own deadline (timeout), TLS and credentials from the settings.
    with http_client(net.config("engine", timeout=timeout, url=url)) as c:
        def one(p: str) -> list[Step]:
            r = request(c, "POST", url.rstrip("/") + "/v1/completions", what="engine", json={
                "model": model, "prompt": p, "max_tokens": max_tokens, "temperature": 0.0, "logprobs": top_k,
                "seed": 0, "return_tokens_as_token_ids": True})
            if r.status_code != 200:
                raise AdvisorError(f"quality guard: {url}/v1/completions answered HTTP {r.status_code}: "
                                   f"{r.text.strip()[:200]}")
            try:
                choice = r.json()["choices"][0]
                if not isinstance(choice, dict):
                    raise TypeError(choice)
                return steps(choice)
            except (ValueError, KeyError, IndexError, TypeError):
                raise AdvisorError(f"quality guard: {url}/v1/completions answered no readable choice") from None

        with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
            return list(pool.map(one, PROMPTS if prompts is None else prompts))


def _prompt_diff(a: list[Step], b: list[Step]) -> tuple[int, list[float]]:
    """(tokens of the baseline's reproduced before the first divergence, per-position differences)."""
    j, diffs = 0, []
    while j < min(len(a), len(b)) and a[j].key == b[j].key:
        if a[j].logprob is not None and b[j].logprob is not None:
            diffs.append(b[j].logprob - a[j].logprob)
        j += 1
    if j < len(a) and j < len(b) and a[j].logprob is not None:
        # The same context, another choice: how likely the candidate found the baseline's token.
        lp = b[j].top.get(a[j].key)
        if lp is None and b[j].top:
            lp = min(b[j].top.values())
        if lp is not None:
            diffs.append(lp - a[j].logprob)
    return j, diffs


def compare(baseline: list[list[Step]], candidate: list[list[Step]], margin: float = MARGIN) -> QualityGuard:
    exact = sum([s.key for s in a] == [s.key for s in b] for a, b in zip(baseline, candidate))
    reproduced = total = positions = 0
    per_prompt = []
    for a, b in zip(baseline, candidate):
        j, diffs = _prompt_diff(a, b)
        reproduced += j
        total += len(a)
        positions += len(diffs)
        if diffs:
            per_prompt.append(sum(diffs) / len(diffs))
    n = len(baseline)
    agreement = reproduced / total if total else 0.0
    mean = ci = verdict = None
    if len(per_prompt) >= 2:
        mean = sum(per_prompt) / len(per_prompt)
        sd = math.sqrt(sum((x - mean) ** 2 for x in per_prompt) / (len(per_prompt) - 1))
        half = float(scipy_stats().t.ppf(0.5 + LEVEL / 2, len(per_prompt) - 1)) * sd / math.sqrt(len(per_prompt))
        ci = (mean - half, mean + half)
        verdict = "within margin" if ci[0] > -margin else "past margin" if ci[1] < -margin else "unclear"
    differ = n - exact
    note = "identical greedy outputs" if differ == 0 else f"{differ} of {n} greedy outputs differ"
    if ci is not None:
        note += (f"; log-likelihood of the baseline's tokens {mean:+.3f} nats/token, {LEVEL:.0%} CI "
                 f"[{ci[0]:+.3f}, {ci[1]:+.3f}] against a margin of -{margin:g}: {verdict}")
    elif differ:
        note += "; the engine gave no log-probabilities: judge task quality before adopting"
    return QualityGuard(prompts=n, exact_match=exact / n if n else 0.0, token_agreement=agreement, note=note,
                        logprob_diff=mean, logprob_ci=ci, margin=margin if ci is not None else None,
                        verdict=verdict, positions=positions)
