"""The quality guard for mechanisms that change numerics (quantization, KV-cache dtype,
speculative decoding): greedy outputs of both arms on a fixed prompt set, compared."""

from __future__ import annotations

from advisor import net
from advisor.errors import AdvisorError
from advisor.experiments.result import QualityGuard
from probes.http import client as http_client
from probes.http import request

PROMPTS = [
    "The capital of France is", "def fibonacci(n):", "Translate to German: good morning",
    "List three prime numbers:", "The quick brown fox", "In 1969, the first person to walk on the moon was",
    "SELECT name FROM users WHERE", "A haiku about autumn:",
]


def greedy(url: str, model: str, max_tokens: int = 32, timeout: float = 60.0) -> list[list[str]]:
    """Each prompt's greedy completion as the engine's own tokens (logprobs.tokens)."""
    out = []
    # Each request within its own deadline (timeout), TLS and credentials from the settings.
    with http_client(net.config("engine", timeout=timeout, url=url)) as c:
        for p in PROMPTS:
            r = request(c, "POST", url.rstrip("/") + "/v1/completions", what="engine", json={
                "model": model, "prompt": p, "max_tokens": max_tokens, "temperature": 0.0, "logprobs": 1,
                "seed": 0})
            if r.status_code != 200:
                raise AdvisorError(f"quality guard: {url}/v1/completions answered HTTP {r.status_code}: "
                                   f"{r.text.strip()[:200]}")
            try:
                choice = r.json()["choices"][0]
                if not isinstance(choice, dict):
                    raise TypeError(choice)
            except (ValueError, KeyError, IndexError, TypeError):
                raise AdvisorError(f"quality guard: {url}/v1/completions answered no choice") from None
            tokens = (choice.get("logprobs") or {}).get("tokens")
            out.append(list(tokens) if tokens else list(choice.get("text", "")))
    return out


def compare(baseline: list[list[str]], candidate: list[list[str]]) -> QualityGuard:
    exact = sum(a == b for a, b in zip(baseline, candidate))
    same = total = 0
    for a, b in zip(baseline, candidate):
        n = max(len(a), len(b))
        total += n
        same += sum(x == y for x, y in zip(a, b))
    agreement = same / total if total else 0.0
    note = ("identical greedy outputs" if exact == len(baseline) else
            f"{len(baseline) - exact} of {len(baseline)} greedy outputs differ; judge task quality before adopting")
    return QualityGuard(prompts=len(baseline), exact_match=exact / len(baseline) if baseline else 0.0,
                        token_agreement=agreement, note=note)
