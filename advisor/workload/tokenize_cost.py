"""How long the target takes to tokenize prompts of the deployment's own lengths.

No engine exports its tokenization time, so it is timed: POST /tokenize (vLLM, SGLang) with prompts
sized in the target's tokens at the deployment's mean and p95 prompt lengths, and at one token. The
one-token round trip is what every call pays whatever its length (HTTP, JSON, the API server's
event loop); the cost of tokenizing a prompt is its round trip less that one. The lengths are timed
in turns, several rounds, and each length's median kept, so that a busy moment of the server cannot
land on one length only. Tokenization is about linear in length, so the cost at the mean length is
about the mean cost per request: over the mean TTFT, the share of TTFT that tokenizing takes.
"""

from __future__ import annotations

import statistics
import time

import httpx
from pydantic import BaseModel, Field

from advisor.errors import AdvisorError
from advisor.workload.plan import PlannedRequest
from advisor.workload.prompts import PromptSizer
from advisor.workload.spec import Workload
from probes.errors import TargetUnreachable
from probes.http import HttpConfig, redact_url, request
from advisor.workload.prompts import PromptSizingError, engine_client

ROUNDS = 7
_clock = time.perf_counter  # a module attribute, so that unit tests can time a stand-in without sleeping
# Which of the deployment's prompt lengths are timed, by the snapshot signal that gives each.
LENGTHS = ("prompt_len_mean", "prompt_len_p95")


class TokenizePoint(BaseModel):
    length_of: str = Field(description="the snapshot signal this prompt length came from, or 'one token'")
    prompt_tokens: int
    round_trip_s: float = Field(description="median of the rounds")
    cost_s: float = Field(description="round trip less the one-token round trip, at least 0")


class TokenizationCost(BaseModel):
    endpoint: str = Field(description="what was timed: POST <engine>/tokenize")
    model: str
    rounds: int
    base_s: float = Field(description="the one-token round trip: what every call pays, whatever its length")
    points: list[TokenizePoint]
    ttft_mean_s: float | None = None
    share: float | None = Field(default=None, description="cost at the mean prompt length / mean TTFT")

    def point(self, length_of: str) -> TokenizePoint | None:
        return next((p for p in self.points if p.length_of == length_of), None)

    def summary(self) -> str:
        parts = [f"{p.cost_s * 1000:.2f} ms at {p.prompt_tokens} tokens ({p.length_of})" for p in self.points]
        share = f"{self.share * 100:.2g} % of the mean TTFT" if self.share is not None else "TTFT not measured"
        return (f"tokenizing takes {', '.join(parts)}: {share}; timed by {self.endpoint} "
                f"({self.rounds} rounds, less the {self.base_s * 1000:.2f} ms one-token round trip)")


class TokenizationNotMeasured(AdvisorError):
    pass


def measure(url: str, model: str, lengths: dict[str, int], *, rounds: int = ROUNDS, timeout: float = 10.0,
            http: HttpConfig | None = None, transport: httpx.BaseTransport | None = None) -> TokenizationCost:
    """Time /tokenize at each length (signal name -> tokens). Raises TokenizationNotMeasured."""

    wanted = {"one token": 1, **{k: max(1, int(v)) for k, v in lengths.items()}}
    try:
        sizer = PromptSizer.for_target(url, model, timeout=timeout, http=http, transport=transport)
        top = max(wanted.values())
        w = Workload.model_validate({"buckets": [{"prompt_tokens": [1, top], "output_tokens": 1}],
                                     "arrival": {"kind": "constant", "rate": 1}, "requests": len(wanted), "seed": 0})
        reqs = [PlannedRequest(i, None, "tokenize", n, 1, None, None) for i, n in enumerate(wanted.values())]
        prompts = sizer.prompts_for(reqs, w, salt="tokenize-cost")
    except PromptSizingError as e:
        raise TokenizationNotMeasured(f"cannot build prompts to time: {e}") from None
    times: dict[int, list[float]] = {r.index: [] for r in reqs}
    bare, c = engine_client(url, timeout, transport, http)
    with c:
        for _ in range(rounds):
            for r in reqs:
                started = _clock()
                try:
                    answer = request(c, "POST", bare + "/tokenize", what="engine",
                                     json={"model": model, "prompt": prompts[r.index]})
                except TargetUnreachable as e:
                    raise TokenizationNotMeasured(f"{redact_url(bare)}/tokenize unreachable: {e}") from None
                elapsed = _clock() - started
                if answer.status_code != 200:
                    raise TokenizationNotMeasured(f"{redact_url(bare)}/tokenize answered HTTP {answer.status_code}")
                times[r.index].append(elapsed)
    medians = {r.index: statistics.median(times[r.index]) for r in reqs}
    base = medians[reqs[0].index]
    points = [TokenizePoint(length_of=name, prompt_tokens=r.prompt_tokens, round_trip_s=medians[r.index],
                            cost_s=max(0.0, medians[r.index] - base))
              for name, r in zip(wanted, reqs) if name != "one token"]
    return TokenizationCost(endpoint=f"POST {redact_url(bare)}/tokenize", model=model, rounds=rounds,
                            base_s=base, points=points)


def for_snapshot(snapshot, url: str | None, *, http: HttpConfig | None = None, timeout: float = 10.0,
                 transport: httpx.BaseTransport | None = None) -> tuple[TokenizationCost | None, str | None]:
    """(cost with its share of the snapshot's mean TTFT, None), or (None, why it was not measured).
    Never fatal: a diagnosis without it says why."""
    if not url:
        return None, "no engine URL to time /tokenize at (diagnose with --url, or give --deployment)"
    model = snapshot.model or next(iter(snapshot.engine.models), None)
    if not model:
        return None, "the served model's name is not known (give --model)"
    lengths = {name: snapshot.value(name) for name in LENGTHS}
    lengths = {k: v for k, v in lengths.items() if v}
    if not lengths:
        return None, "the deployment's prompt lengths were not measured (" + ", ".join(LENGTHS) + ")"
    cap = snapshot.engine.max_model_len
    if cap:
        lengths = {k: min(v, cap - 1) for k, v in lengths.items()}
    try:
        cost = measure(url, model, lengths, http=http, timeout=timeout, transport=transport)
    except TokenizationNotMeasured as e:
        return None, str(e)
    ttft = snapshot.value("ttft_mean")
    mean = cost.point("prompt_len_mean")
    cost.ttft_mean_s = ttft
    if ttft and mean is not None:
        cost.share = mean.cost_s / ttft
    return cost, None
