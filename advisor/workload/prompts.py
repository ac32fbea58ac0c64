"""Prompt texts sized in the target's own tokens.

Counting goes through the engine's POST /tokenize where it has one, else through a tokenizer named
in the workload (transformers or tokenizers, imported only then).

How a prompt is built, and why the sizes are exact for word-splitting tokenizers (byte-level BPE,
SentencePiece, tiktoken-style: all split at spaces before merging, so tokens never straddle a space
and counts add up word by word):
- calibration, once per sizer and API: the count of the lead word alone (it carries any BOS or chat
  template tokens), then units that add one token each when appended: " word" for words from a
  fixed list, checked in chunks (a chunk of n units that adds exactly n tokens needs no further look);
- a tokenizer with too few one-token words (code, Chinese or small models' vocabularies split every
  word, or have one token per character) is calibrated from its own vocabulary instead: the tokens
  of a sample text, each turned back into text alone (the engine's POST /detokenize, or the named
  tokenizer's decode), checked the same way. Pieces that begin with a space are preferred: each is
  its own pre-token, so they add up as words do; a character vocabulary adds up whatever follows;
- a prompt is: lead word, [the group's shared prefix units], a nonce of units that encodes the
  request's index (so unrelated prompts differ within their first few tokens and never share a
  KV-cache block), then filler units drawn from a per-request generator;
- each prompt is counted once to verify; a miss is corrected by adding or removing filler units and
  counting again. Where additivity holds that one count is the only one.
"""

from __future__ import annotations

import logging
import math
import random
import re
from dataclasses import dataclass, field
from typing import Callable, Literal

import httpx

from advisor.workload.plan import PlannedRequest
from advisor.workload.spec import Workload, WorkloadError
from probes.errors import TargetUnreachable
from probes.http import HttpConfig, request, split_userinfo
from probes.http import client as http_client
from advisor import net

log = logging.getLogger(__name__)

# The stated guarantee: every achievable prompt is within this many tokens of its target. The loop
# below aims for 0 and reaches it on word-splitting tokenizers; the slack covers tokenizers that
# merge across spaces. Unachievable: a target shorter than the lead word (with BOS / template).
TOLERANCE_TOKENS = 2
MAX_ROUNDS = 6
CHUNK_WORDS = 16
WANT_WORDS = 24  # one-token units to find before calibration stops looking
MIN_WORDS = 8
CALIBRATION_CALLS = 48  # at most this many counts spent looking for one-token units (per kind)
MAX_PIECES = 96  # vocabulary pieces turned back into text (one /detokenize each) at most
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


def engine_client(url: str, timeout: float, transport: httpx.BaseTransport | None = None,
                  http: HttpConfig | None = None) -> tuple[str, httpx.Client]:
    """(the engine's base URL without credentials, a client for it): each request within one
    deadline (timeout); TLS and credentials from `http`, else from the settings (advisor/net.py),
    and any user:password in the URL."""

    bare, userinfo = split_userinfo(url.rstrip("/"))
    cfg = (http or net.config("engine", url=bare)).with_(timeout=timeout)
    return bare, http_client(cfg.with_(auth=userinfo) if userinfo else cfg, transport=transport)


class _EngineCounter:
    """Counts through the engine's POST /tokenize: vLLM and SGLang read {"model", "prompt"|"messages"}
    and answer {"count"}; llama-server reads {"content"} (a chat rendered first by its
    /apply-template) and answers {"tokens"}, an empty list for a body it does not read."""

    def __init__(self, url: str, model: str, timeout: float, transport: httpx.BaseTransport | None,
                 http: HttpConfig | None = None):
        self.url, self._http = engine_client(url, timeout, transport, http)
        self.model = model
        self._llama: bool | None = None  # llama-server's /tokenize, found at the first count

    def _llama_count(self, text: str, api: Api) -> int:
        if api == "chat":
            text = self._json("/apply-template", {"messages": [{"role": "user", "content": text}]}).get("prompt")
            if not isinstance(text, str):
                raise PromptSizingError(f"{self.url}/apply-template answered no prompt")
        tokens = self._json("/tokenize", {"content": text, "add_special": True}).get("tokens")
        if not isinstance(tokens, list):
            raise PromptSizingError(f"{self.url}/tokenize answered no token list")
        return len(tokens)

    def __call__(self, text: str, api: Api) -> int:
        if self._llama:
            return self._llama_count(text, api)
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
                if not answer["tokens"] and text.strip() and self._llama is None:
                    self._llama = True
                    return self._llama_count(text, api)
                self._llama = False
                return len(answer["tokens"])
        raise PromptSizingError(f"{self.url}/tokenize answered HTTP {r.status_code}: {r.text[:200]}")


    def pieces(self, sample: str) -> list[str]:
        """The texts of the tokens of `sample`, each decoded alone (POST /tokenize, then /detokenize)."""
        if self._llama is None:
            self("a sample", "completions")
        body = ({"content": sample, "add_special": False} if self._llama else
                {"model": self.model, "prompt": sample, "add_special_tokens": False})
        ids = self._json("/tokenize", body).get("tokens")
        if not isinstance(ids, list):
            raise PromptSizingError(f"{self.url}/tokenize does not list token ids, so its vocabulary cannot be read")
        out = []
        for i in list(dict.fromkeys(ids))[:MAX_PIECES]:
            text = self._json("/detokenize", {"model": self.model, "tokens": [i]}).get(
                "content" if self._llama else "prompt")
            if isinstance(text, str):
                out.append(text)
        return out

    def _json(self, path: str, body: dict) -> dict:
        try:
            r = request(self._http, "POST", self.url + path, what="engine", json=body)
        except TargetUnreachable as e:
            raise PromptSizingError(f"{self.url}{path} unreachable: {e}") from e
        if r.status_code != 200:
            raise PromptSizingError(f"{self.url}{path} answered HTTP {r.status_code}: {r.text[:200]}")
        try:
            answer = r.json()
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise PromptSizingError(f"{self.url}{path} answered something other than a JSON object: {r.text[:200]}")
        return answer


class _NoTokenize(PromptSizingError):
    pass


class _LocalTokenizer:
    """A named tokenizer: counts, and its vocabulary's pieces for tokenizers without whole words."""

    def __init__(self, count: Callable[[str, Api], int], encode: Callable[[str], list[int]],
                 decode: Callable[[list[int]], str]):
        self._count, self._encode, self._decode = count, encode, decode

    def __call__(self, text: str, api: Api) -> int:
        return self._count(text, api)

    def pieces(self, sample: str) -> list[str]:
        return [self._decode([i]) for i in list(dict.fromkeys(self._encode(sample)))[:MAX_PIECES]]


def _local_counter(name: str) -> _LocalTokenizer:
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

        return _LocalTokenizer(count, lambda text: tok(text, add_special_tokens=False)["input_ids"],
                               lambda ids: tok.decode(ids))
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

    return _LocalTokenizer(count_plain, lambda text: tk.encode(text, add_special_tokens=False).ids,
                           lambda ids: tk.decode(ids))


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
    units: list[str]  # texts that add one token each when appended: " word", or a vocabulary piece
    kind: Literal["words", "pieces"] = "words"


# Vocabulary pieces a prompt may be made of: some letter or digit, nothing a tokenizer may read as a
# special token (<s>, [CLS], <|user|>), no replacement character (half of a multi-byte character).
_SPECIAL = re.compile(r"<[^>]*>|\[[A-Z]+\]")


def _usable_piece(text: str) -> bool:
    return (any(c.isalnum() for c in text) and text.isprintable() and "\ufffd" not in text
            and not _SPECIAL.search(text))


class PromptSizer:
    """Builds prompts of exact token lengths for one target (see the module docstring)."""

    def __init__(self, counter: Callable[[str, Api], int], source: str,
                 verify: Literal["all", "sample"] = "all"):
        """counter: text, api -> tokens. A counter with a `pieces(sample) -> [text of each token]`
        method also sizes prompts for tokenizers that have too few one-token words."""
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

    def report(self) -> dict:
        """How the prompts were sized, for a run's manifest: the counter, what prompts are made of
        (common words, or pieces of the target's own vocabulary), and how close they came."""
        s = self.stats
        return {"counted_by": self.source, "units": sorted({c.kind for c in self._cal.values()}),
                "tolerance_tokens": TOLERANCE_TOKENS, "prompts": s.prompts, "exact": s.exact,
                "max_abs_error": s.max_abs_error, "misses": len(s.misses), "unverified": s.unverified,
                "counts": self.calls}

    def summary(self) -> str:
        """One line for progress: how many prompts, counted by what, and how close they came."""
        s = self.stats
        trusted = (f"; {s.unverified:,} predicted like the counted ones around them, not counted"
                   if s.unverified else "")
        off = (f"{len(s.misses)} more than {TOLERANCE_TOKENS} tokens off (worst {s.max_abs_error})" if s.misses
               else "every counted one exact" if s.max_abs_error == 0
               else f"every counted one within {s.max_abs_error} tokens")
        return f"{s.prompts:,} prompts sized by {self.source}: {self.calls:,} counts, {off}{trusted}"

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
        found = self._one_token_units(head, [" " + w for w in WORDS], api)
        if len(found) >= MIN_WORDS:
            self._cal[api] = _Calibration(head, found)
            return self._cal[api]
        pieces = getattr(self._count_fn, "pieces", None)
        why = f"{self.source}: only {len(found)} of {len(WORDS)} common words are one token each"
        if pieces is None:
            raise PromptSizingError(f"{why}, and its vocabulary cannot be read; cannot size prompts")
        candidates = list(dict.fromkeys(p for p in pieces(" ".join(WORDS)) if _usable_piece(p)))
        # Space-led pieces first, and alone when there are enough: each is its own pre-token.
        spaced = self._one_token_units(head, [p for p in candidates if p[0].isspace()], api)
        units = spaced if len(spaced) >= MIN_WORDS else self._one_token_units(head, candidates, api)
        if len(units) < MIN_WORDS:
            raise PromptSizingError(f"{why}, and only {len(units)} of {len(candidates)} pieces of its vocabulary add "
                                    f"one token each; cannot size prompts")
        log.info("%s; sizing prompts from %d pieces of its own vocabulary", why, len(units))
        self._cal[api] = _Calibration(head, units, "pieces")
        return self._cal[api]

    def _one_token_units(self, head: int, candidates: list[str], api: Api) -> list[str]:
        """The candidates that add exactly one token each after the lead word, looked at in chunks."""
        found: list[str] = []
        spent = self.calls

        def probe(units: list[str]) -> None:
            if len(found) >= WANT_WORDS or self.calls - spent >= CALIBRATION_CALLS:
                return
            if self._count(LEAD + "".join(units), api, remember=True) - head == len(units):
                found.extend(units)
            elif len(units) > 1:
                probe(units[: len(units) // 2])
                probe(units[len(units) // 2:])

        for i in range(0, len(candidates), CHUNK_WORDS):
            probe(candidates[i:i + CHUNK_WORDS])
        return found

    def _fit(self, parts: list[str], filler: list[str], target: int, api: Api) -> tuple[str, int, int]:
        """Add or remove filler words until the text counts `target` tokens, re-counting each time.

        One word is one token where counts add up, so the first correction lands; where they do not,
        a step that overshoots is halved next time, so the loop settles instead of oscillating.
        Returns the closest text, its count, and the first count (the prediction's check)."""
        units = self._cal[api].units
        best, last, first = None, 0, None
        for _ in range(MAX_ROUNDS):
            text = "".join(parts + filler)
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
                filler = filler + [units[(len(filler) + i) * 7 % len(units)] for i in range(step)]
            else:
                filler = filler[: max(0, len(filler) + step)]
        return (*best, first)

    def _prefix_text(self, group: int, tokens: int, seed: int, salt: str, api: Api) -> tuple[str, int]:
        key = (group, tokens, seed, salt, api)
        if key not in self._prefixes:
            cal = self._cal[api]
            # Seeded by group alone, so a shorter cut of the prefix begins with the same words.
            rng = random.Random(f"prefix:{seed}:{salt}:{group}")
            units = [rng.choice(cal.units) for _ in range(max(0, tokens - cal.head))]
            self._prefixes[key] = self._fit([LEAD], units, tokens, api)[:2]
        return self._prefixes[key]

    def prompts_for(self, requests: list[PlannedRequest], workload: Workload, *, salt: str = "",
                    prefix_tokens: dict[int, int] | None = None) -> dict[int, str]:
        """Request index -> prompt text of the request's prompt_tokens in the target's tokens.

        Requests in one prefix group begin with the same text of the group's prefix length
        (workload.prefix.tokens, or prefix_tokens[group] for a trace's own lengths). `salt` changes
        every text but keeps the sizes, for runs that must not hit each other's cache."""
        api: Api = workload.api
        cal = self._calibrate(api)
        base = len(cal.units)
        top = max((r.index for r in requests), default=0)
        digits = max(2, math.ceil(math.log(top + 1, base)) if top > 0 else 1)
        order = random.Random(f"nonce:{workload.seed}:{salt}").sample(cal.units, base)
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
            filler = [rng.choice(cal.units) for _ in range(max(0, r.prompt_tokens - used - len(nonce)))]
            predicted = used + len(nonce) + len(filler)
            if self.verify == "sample" and streak >= TRUST_AFTER and k % SAMPLE_EVERY and predicted == r.prompt_tokens:
                out[r.index] = "".join(parts + nonce + filler)
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
