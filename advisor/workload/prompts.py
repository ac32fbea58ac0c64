"""Prompt texts sized in the target's own tokens.

Counting goes through the engine's POST /tokenize where it has one, else through a tokenizer named
in the workload (transformers or tokenizers, imported only then).

How a prompt is built, and why the sizes are exact for word-splitting tokenizers (byte-level BPE,
SentencePiece, tiktoken-style: all split at spaces before merging, so tokens never straddle a space
and counts add up word by word):
- calibration, once per sizer and API: the count of the lead word alone (it carries any BOS or chat
  template tokens), then words from a fixed list checked in chunks for being one token each
  (a chunk of n words that adds exactly n tokens needs no further look);
- a prompt is: lead word, [the group's shared prefix words], a nonce of list words that encodes the
  request's index (so unrelated prompts differ within their first few tokens and never share a
  KV-cache block), then filler words drawn from a per-request generator;
- each prompt is counted once to verify; a miss is corrected by adding or removing filler words and
  counting again. Where additivity holds that one count is the only one.
"""

from __future__ import annotations

import logging
import math
import random
from dataclasses import dataclass, field
from typing import Callable, Literal

import httpx

from advisor.workload.plan import PlannedRequest
from advisor.workload.spec import Workload, WorkloadError
from probes.errors import TargetUnreachable
from probes.http import HttpConfig, request, split_userinfo
from probes.http import client as http_client

log = logging.getLogger(__name__)

# The stated guarantee: every achievable prompt is within this many tokens of its target. The loop
# below aims for 0 and reaches it on word-splitting tokenizers; the slack covers tokenizers that
# merge across spaces. Unachievable: a target shorter than the lead word (with BOS / template).
TOLERANCE_TOKENS = 2
MAX_ROUNDS = 6
CHUNK_WORDS = 16
WANT_WORDS = 24  # one-token words to find before calibration stops looking
MIN_WORDS = 8
CALIBRATION_CALLS = 48  # at most this many counts spent looking for one-token words
# verify="sample": after this many predictions in a row came out exact, count only every
# SAMPLE_EVERY-th prompt; one miss and every prompt is counted again, the skipped ones too.
TRUST_AFTER = 32
SAMPLE_EVERY = 10
LEAD = "the"
# Common English words, function words first: one token each in most tokenizers, so the first
# chunk usually passes whole. The serving terms overlap the tiny test model's training words.
WORDS = (
    "of and to in is for on with as by at from it a the an "
    "model serves tokens queue latency cache prefix batch decode prefill request memory kernel attention gpu "
    "be this that are was or not but all can has have will one more new time data work set use way day "
    "world life hand part place case week point number group problem fact system program question "
    "company home water room area money story month right study book eye job word business issue side "
    "kind head house service friend power hour game line end member law car city name team minute idea "
    "body information back parent face level office door health person art war history party result "
    "change morning reason research moment air force education"
).split()


class PromptSizingError(WorkloadError):
    """Prompts cannot be sized for this target: no /tokenize and no usable tokenizer. A WorkloadError,
    so that callers that report a bad workload report this one the same way."""


Api = Literal["completions", "chat"]


class _EngineCounter:
    """Counts through the engine's POST /tokenize (vLLM, SGLang: {"model", "prompt"|"messages"} -> {"count"})."""

    def __init__(self, url: str, model: str, timeout: float, transport: httpx.BaseTransport | None,
                 http: HttpConfig | None = None):
        url, userinfo = split_userinfo(url)
        self.url, self.model = url.rstrip("/"), model
        # Each count within one request deadline (timeout); TLS and credentials from `http`, else
        # from the settings (advisor/net.py).
        from advisor import net

        cfg = (http or net.config("engine", url=url)).with_(timeout=timeout)
        self._http = http_client(cfg.with_(auth=userinfo) if userinfo else cfg, transport=transport)

    def __call__(self, text: str, api: Api) -> int:
        body = {"model": self.model}
        body.update({"messages": [{"role": "user", "content": text}]} if api == "chat" else {"prompt": text})
        try:
            r = request(self._http, "POST", self.url + "/tokenize", what="engine", json=body)
        except TargetUnreachable as e:
            raise PromptSizingError(f"{self.url}/tokenize unreachable: {e}") from e
        try:
            answer = r.json()
        except ValueError:
            answer = None
        if r.status_code in (404, 405):
            err = answer.get("error") if isinstance(answer, dict) else None
            # vLLM answers 404 for an unknown model too; that one is not "no /tokenize".
            if isinstance(err, dict) and "model" in str(err.get("message", "")).lower():
                raise PromptSizingError(f"{self.url}/tokenize: {err.get('message')}")
            raise _NoTokenize(f"{self.url} has no /tokenize (HTTP {r.status_code})")
        if r.status_code == 200 and isinstance(answer, dict):
            if isinstance(answer.get("count"), int):
                return answer["count"]
            if isinstance(answer.get("tokens"), list):
                return len(answer["tokens"])
        raise PromptSizingError(f"{self.url}/tokenize answered HTTP {r.status_code}: {r.text[:200]}")


class _NoTokenize(PromptSizingError):
    pass


def _local_counter(name: str) -> Callable[[str, Api], int]:
    try:
        from transformers import AutoTokenizer  # heavy; only when a tokenizer is named
    except ImportError:
        AutoTokenizer = None
    if AutoTokenizer is not None:
        try:
            tok = AutoTokenizer.from_pretrained(name)
        except Exception as e:  # transformers raises OSError, ValueError, HF hub errors...
            raise PromptSizingError(f"cannot load tokenizer {name!r}: {e}") from e

        def count(text: str, api: Api) -> int:
            if api == "chat":
                ids = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                              tokenize=True)
                # transformers 5 returns an encoding (a mapping), 4 a plain list of ids.
                return len(ids["input_ids"] if hasattr(ids, "keys") else ids)
            return len(tok(text)["input_ids"])

        return count
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise PromptSizingError(f"tokenizer {name!r} named, but neither transformers nor tokenizers is installed "
                                "(pip install tokenizers), and the target has no /tokenize") from None
    try:
        tk = Tokenizer.from_file(name) if name.endswith(".json") else Tokenizer.from_pretrained(name)
    except Exception as e:
        raise PromptSizingError(f"cannot load tokenizer {name!r}: {e}") from e

    def count_plain(text: str, api: Api) -> int:
        if api == "chat":
            raise PromptSizingError("chat prompts need transformers' chat template; install transformers")
        return len(tk.encode(text).ids)

    return count_plain


@dataclass
class SizingStats:
    prompts: int = 0
    exact: int = 0
    max_abs_error: int = 0
    misses: list[int] = field(default_factory=list)  # request indices outside TOLERANCE_TOKENS
    unverified: int = 0  # verify="sample": built by prediction, not counted


@dataclass
class _Calibration:
    head: int  # tokens of the lead word alone (plus BOS / template)
    words: list[str]  # one token each after a space


class PromptSizer:
    """Builds prompts of exact token lengths for one target (see the module docstring)."""

    def __init__(self, counter: Callable[[str, Api], int], source: str,
                 verify: Literal["all", "sample"] = "all"):
        self._count_fn = counter
        self.verify = verify
        self.source = source
        self.calls = 0  # token counts asked of the target or tokenizer (repeats are answered from memory)
        self.stats = SizingStats()
        self._counted: dict[tuple[str, str], int] = {}
        self._cal: dict[str, _Calibration] = {}
        self._prefixes: dict[tuple, tuple[str, int]] = {}

    @classmethod
    def from_url(cls, url: str, model: str, timeout: float = 10.0,
                 transport: httpx.BaseTransport | None = None, verify: Literal["all", "sample"] = "all",
                 http: HttpConfig | None = None) -> "PromptSizer":
        counter = _EngineCounter(url, model, timeout, transport, http)
        return cls(counter, f"{counter.url}/tokenize (model {model})", verify)

    @classmethod
    def from_tokenizer(cls, name: str, verify: Literal["all", "sample"] = "all") -> "PromptSizer":
        return cls(_local_counter(name), f"tokenizer {name}", verify)

    @classmethod
    def for_target(cls, url: str, model: str, tokenizer: str | None = None, timeout: float = 10.0,
                   transport: httpx.BaseTransport | None = None,
                   verify: Literal["all", "sample"] = "all", http: HttpConfig | None = None) -> "PromptSizer":
        """The target's /tokenize if it answers, else the named tokenizer. http: TLS and credentials
        (default: the settings' for an engine)."""
        sizer = cls.from_url(url, model, timeout, transport, verify, http)
        try:
            sizer._count(LEAD, "completions", remember=True)
            return sizer
        except _NoTokenize as e:
            if not tokenizer:
                raise PromptSizingError(f"{e}, and the workload names no tokenizer: set `tokenizer:` in it") from None
            log.info("%s; sizing prompts with tokenizer %s", e, tokenizer)
            return cls.from_tokenizer(tokenizer, verify)

    def _count(self, text: str, api: Api, remember: bool = False) -> int:
        # Only calibration texts are remembered: prompts are many and long, and never counted twice.
        key = (text, api)
        if key in self._counted:
            return self._counted[key]
        self.calls += 1
        n = self._count_fn(text, api)
        if remember:
            self._counted[key] = n
        return n

    def _calibrate(self, api: Api) -> _Calibration:
        if api in self._cal:
            return self._cal[api]
        head = self._count(LEAD, api, remember=True)
        found: list[str] = []

        spent = self.calls

        def probe(words: list[str]) -> None:
            if len(found) >= WANT_WORDS or self.calls - spent >= CALIBRATION_CALLS:
                return
            if self._count(" ".join([LEAD, *words]), api, remember=True) - head == len(words):
                found.extend(words)
            elif len(words) > 1:
                probe(words[: len(words) // 2])
                probe(words[len(words) // 2:])

        for i in range(0, len(WORDS), CHUNK_WORDS):
            probe(WORDS[i:i + CHUNK_WORDS])
        if len(found) < MIN_WORDS:
            raise PromptSizingError(f"{self.source}: only {len(found)} of {len(WORDS)} common words are one token "
                                    f"each; cannot size prompts by words")
        self._cal[api] = _Calibration(head, found)
        return self._cal[api]

    def _fit(self, parts: list[str], filler: list[str], target: int, api: Api) -> tuple[str, int, int]:
        """Add or remove filler words until the text counts `target` tokens, re-counting each time.

        One word is one token where counts add up, so the first correction lands; where they do not,
        a step that overshoots is halved next time, so the loop settles instead of oscillating.
        Returns the closest text, its count, and the first count (the prediction's check)."""
        words = self._cal[api].words
        best, last, first = None, 0, None
        for _ in range(MAX_ROUNDS):
            text = " ".join(parts + filler)
            n = self._count(text, api)
            first = n if first is None else first
            if best is None or abs(n - target) < abs(best[1] - target):
                best = (text, n)
            delta = target - n
            if delta == 0 or (delta < 0 and not filler):
                break
            step = delta if delta * last >= 0 else int(math.copysign(max(1, abs(delta) // 2), delta))
            last = delta
            if step > 0:
                filler = filler + [words[(len(filler) + i) * 7 % len(words)] for i in range(step)]
            else:
                filler = filler[: max(0, len(filler) + step)]
        return (*best, first)

    def _prefix_text(self, group: int, tokens: int, seed: int, salt: str, api: Api) -> tuple[str, int]:
        key = (group, tokens, seed, salt, api)
        if key not in self._prefixes:
            cal = self._cal[api]
            # Seeded by group alone, so a shorter cut of the prefix begins with the same words.
            rng = random.Random(f"prefix:{seed}:{salt}:{group}")
            words = [rng.choice(cal.words) for _ in range(max(0, tokens - cal.head))]
            self._prefixes[key] = self._fit([LEAD], words, tokens, api)[:2]
        return self._prefixes[key]

    def prompts_for(self, requests: list[PlannedRequest], workload: Workload, *, salt: str = "",
                    prefix_tokens: dict[int, int] | None = None) -> dict[int, str]:
        """Request index -> prompt text of the request's prompt_tokens in the target's tokens.

        Requests in one prefix group begin with the same text of the group's prefix length
        (workload.prefix.tokens, or prefix_tokens[group] for a trace's own lengths). `salt` changes
        every text but keeps the sizes, for runs that must not hit each other's cache."""
        api: Api = workload.api
        cal = self._calibrate(api)
        base = len(cal.words)
        top = max((r.index for r in requests), default=0)
        digits = max(2, math.ceil(math.log(top + 1, base)) if top > 0 else 1)
        order = random.Random(f"nonce:{workload.seed}:{salt}").sample(cal.words, base)
        out: dict[int, str] = {}
        pending: dict[int, tuple[list[str], list[str], int]] = {}  # built but not yet counted
        streak = 0
        for k, r in enumerate(requests):
            parts, used = [LEAD], cal.head
            if r.prefix_group is not None and workload.prefix is not None:
                want = (prefix_tokens or {}).get(r.prefix_group, workload.prefix.tokens)
                text, used = self._prefix_text(r.prefix_group, min(want, r.prompt_tokens - 1), workload.seed, salt, api)
                parts = [text]
            # Least significant digit first: neighbouring requests differ at the first nonce word.
            nonce = [order[(r.index // base**d) % base] for d in range(digits)]
            nonce = nonce[: max(0, r.prompt_tokens - used)]  # a prompt too short for it cannot be told apart anyway
            rng = random.Random(f"filler:{workload.seed}:{salt}:{r.index}")
            filler = [rng.choice(cal.words) for _ in range(max(0, r.prompt_tokens - used - len(nonce)))]
            predicted = used + len(nonce) + len(filler)
            if self.verify == "sample" and streak >= TRUST_AFTER and k % SAMPLE_EVERY and predicted == r.prompt_tokens:
                out[r.index] = " ".join(parts + nonce + filler)
                pending[r.index] = (parts + nonce, filler, r.prompt_tokens)
                continue
            text, n, first = self._fit(parts + nonce, filler, r.prompt_tokens, api)
            streak = streak + 1 if first == predicted else 0
            if first != predicted and pending:
                self._settle(pending, out, api)
            out[r.index] = text
            self._record(r.index, n - r.prompt_tokens)
        self.stats.prompts += len(pending)
        self.stats.unverified += len(pending)  # trusted: every counted neighbour came out as predicted
        if self.stats.misses:
            log.warning("%d prompts missed their size by more than %d tokens (worst %d)",
                        len(self.stats.misses), TOLERANCE_TOKENS, self.stats.max_abs_error)
        return out

    def _settle(self, pending: dict, out: dict[int, str], api: Api) -> None:
        """A prediction failed: count and correct every prompt that was trusted so far."""
        for index, (parts, filler, target) in pending.items():
            out[index], n, _ = self._fit(parts, filler, target, api)
            self._record(index, n - target)
        pending.clear()

    def _record(self, index: int, err: int) -> None:
        s = self.stats
        s.prompts += 1
        s.exact += err == 0
        s.max_abs_error = max(s.max_abs_error, abs(err))
        if abs(err) > TOLERANCE_TOKENS:
            s.misses.append(index)
