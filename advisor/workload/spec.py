"""A workload: what to send and when. Buckets over prompt x output length, shared-prefix groups,
an arrival process, cancellations, a length (duration or request count) and a seed."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from advisor.errors import AdvisorError
from advisor.inputs import InputModel, load_model
from advisor.ranges import DURATION_MAX_S, TOKENS_MAX, DurationS, Rate
from advisor.units import (MAX_CONCURRENCY, MAX_LOAD_DURATION_S, MAX_LOAD_RATE, MAX_LOAD_REQUESTS, check_ceiling,
                           duration_text)


class _Strict(InputModel):
    """Unknown keys and non-finite numbers refused; a file is validated strictly (advisor/inputs.py)."""


def _pair(v):
    # A YAML (or JSON) list is how a file writes a range; strict validation wants the tuple.
    return tuple(v) if isinstance(v, list) else v


class Bucket(_Strict):
    """Requests whose prompt and output lengths (in the target's tokens) fall in these ranges."""

    name: str | None = None
    prompt_tokens: tuple[int, int] = Field(description="inclusive range; a single number means exactly that")
    output_tokens: tuple[int, int]
    weight: float = Field(default=1.0, gt=0)
    priority: int | None = Field(default=None, ge=-1_000_000, le=1_000_000,
                                 description="the request priority sent with this bucket's requests (vLLM's "
                                 "`priority`: lower is served first when the engine schedules by priority; "
                                 "ignored under first come, first served). None: not sent")

    @model_validator(mode="before")
    @classmethod
    def _ranges(cls, data):
        if isinstance(data, dict):
            for k in ("prompt_tokens", "output_tokens"):
                v = data.get(k)
                if isinstance(v, int) and not isinstance(v, bool):
                    data = {**data, k: (v, v)}
                elif isinstance(v, list):
                    data = {**data, k: _pair(v)}
        return data

    @model_validator(mode="after")
    def _ordered(self):
        for k in ("prompt_tokens", "output_tokens"):
            lo, hi = getattr(self, k)
            if lo < 1 or hi < lo:
                raise ValueError(f"{k} must be 1 <= low <= high, got [{lo}, {hi}]")
            if hi > TOKENS_MAX:
                raise ValueError(f"{k} {hi:,} is above the ceiling of {TOKENS_MAX:,} tokens")
        return self

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        p, o = self.prompt_tokens, self.output_tokens
        fmt = lambda r: f"{r[0]}" if r[0] == r[1] else f"{r[0]}-{r[1]}"  # noqa: E731
        return f"p{fmt(p)}/o{fmt(o)}"


class Prefix(_Strict):
    """Shared-prefix groups: `share` of requests start with one of `groups` fixed prefixes."""

    groups: int = Field(default=1, ge=1)
    tokens: int = Field(ge=1, le=TOKENS_MAX, description="length of each shared prefix, in the target's tokens")
    share: float = Field(ge=0, le=1, description="fraction of requests that carry a shared prefix")


class Arrival(_Strict):
    kind: Literal["constant", "poisson", "gamma", "concurrency"] = "poisson"
    rate: Rate | None = Field(default=None, description="requests per second (open loop)")
    burstiness: float = Field(default=1.0, gt=0, description="gamma only: 1 = Poisson, <1 burstier, >1 smoother")
    concurrency: int | None = Field(default=None, ge=1, description="closed loop: requests in flight")

    @model_validator(mode="after")
    def _needs(self):
        if self.kind == "concurrency" and not self.concurrency:
            raise ValueError("arrival kind 'concurrency' needs concurrency")
        if self.kind != "concurrency" and not self.rate:
            raise ValueError(f"arrival kind {self.kind!r} needs rate (requests per second)")
        return self


class Cancellation(_Strict):
    rate: float = Field(default=0.0, ge=0, le=1, description="fraction of requests the client cancels")
    after_tokens: tuple[int, int] = Field(default=(1, 8), description="cancel after this many streamed tokens")

    _pairs = field_validator("after_tokens", mode="before")(lambda v: _pair(v))


class Workload(_Strict):
    name: str = "workload"
    model: str | None = Field(default=None, description="served model name; default: the target's first model")
    api: Literal["completions", "chat"] = "completions"
    buckets: list[Bucket] = Field(min_length=1)
    prefix: Prefix | None = None
    arrival: Arrival
    cancellation: Cancellation = Field(default_factory=Cancellation)
    duration_s: DurationS | None = None
    requests: int | None = Field(default=None, ge=1)
    warmup_s: float = Field(default=0.0, ge=0, le=DURATION_MAX_S,
                            description="requests scheduled before this are excluded from metrics")
    seed: int = 0
    tokenizer: str | None = Field(default=None, description="used when the target has no /tokenize")
    source: str = Field(default="by hand", description="where the shape came from: file, telemetry or trace")

    @model_validator(mode="after")
    def _length(self):
        if self.duration_s is None and self.requests is None:
            raise ValueError("give duration_s or requests")
        if self.arrival.kind == "concurrency" and self.requests is None and self.duration_s is None:
            raise ValueError("a closed-loop workload needs requests or duration_s")
        if self.prefix:
            # Only prompts longer than the prefix can carry it (plan() gives them their group).
            longest = max(b.prompt_tokens[1] for b in self.buckets)
            if self.prefix.tokens >= longest:
                raise ValueError(f"prefix.tokens ({self.prefix.tokens}) must be shorter than the longest prompt ({longest})")
        return self


class WorkloadError(AdvisorError, ValueError):
    """A workload or trace file is malformed: the message names the file, line and field."""


def load_workload(path: Path) -> Workload:
    """A workload file, validated strictly; every error one line naming the file, field and line."""
    return load_model(path, Workload, WorkloadError, prepare=lambda data: {"source": f"file {path.name}", **data},
                      check=ceiling_problem)


def ceiling_problem(w: Workload) -> tuple[tuple, str] | None:
    """(the field, the problem) where the workload asks more than one load takes on (the ceilings in
    advisor/units.py); None when it fits. Checked before a single request is drawn."""
    a = w.arrival
    checks = [(("duration_s",), w.duration_s, MAX_LOAD_DURATION_S, True, "the longest load run"),
              (("warmup_s",), w.warmup_s, MAX_LOAD_DURATION_S, True, "the longest load run"),
              (("arrival", "rate"), a.rate, MAX_LOAD_RATE, False, "requests per second one load sends"),
              (("arrival", "concurrency"), a.concurrency, MAX_CONCURRENCY, False, "closed-loop slots"),
              (("requests",), w.requests, MAX_LOAD_REQUESTS, False, "requests one load plans")]
    for loc, value, ceiling, duration, why in checks:
        if value is None:
            continue
        try:
            check_ceiling(value, ceiling, "", why, duration=duration)
        except ValueError as e:
            return loc, str(e).lstrip()
    if a.kind != "concurrency" and w.requests is None and w.duration_s is not None:
        expected = a.rate * w.duration_s
        if expected > MAX_LOAD_REQUESTS:
            return ("arrival", "rate"), (f"{a.rate:g} requests per second for {duration_text(w.duration_s)} "
                                         f"plans about {expected:,.0f} requests, above the ceiling of "
                                         f"{MAX_LOAD_REQUESTS:,} on one load; lower the rate, shorten the "
                                         "duration or give requests")
    return None


def check_ceilings(w: Workload, where: str = "the workload") -> None:
    """WorkloadError in one line when the workload is past a ceiling (ceiling_problem)."""
    found = ceiling_problem(w)
    if found is not None:
        loc, problem = found
        raise WorkloadError(f"{where}: field {'.'.join(loc)}: {problem}")
