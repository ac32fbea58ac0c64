"""One request as the load generator saw it. Times are seconds from the run's start
(time.perf_counter based), so records of one run compare directly."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

Status = Literal["ok", "error", "cancelled", "not_sent"]


@dataclass
class RequestRecord:
    index: int
    bucket: str
    prompt_tokens: int
    max_tokens: int
    scheduled_s: float | None
    sent_s: float | None = None
    first_token_s: float | None = None
    last_token_s: float | None = None
    chunk_s: list[float] = field(default_factory=list)
    output_tokens: int = 0
    status: Status = "not_sent"
    http_status: int | None = None
    error: str | None = None
    prefix_group: int | None = None
    priority: int | None = None
    replica: int | None = None  # which of an arm's replicas served it (Target.spread); None: one replica

    @property
    def ttft(self) -> float | None:
        if self.sent_s is None or self.first_token_s is None:
            return None
        return self.first_token_s - self.sent_s

    @property
    def e2e(self) -> float | None:
        if self.sent_s is None or self.last_token_s is None or self.status != "ok":
            return None
        return self.last_token_s - self.sent_s

    @property
    def tpot(self) -> float | None:
        """vLLM bench's definition: (E2E - TTFT) / (output tokens - 1)."""
        if self.e2e is None or self.ttft is None or self.output_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)

    @property
    def itls(self) -> list[float]:
        return [b - a for a, b in zip(self.chunk_s, self.chunk_s[1:])]

    @property
    def lag(self) -> float | None:
        if self.sent_s is None or self.scheduled_s is None:
            return None
        return self.sent_s - self.scheduled_s

    def to_row(self) -> dict:
        row = asdict(self)
        row.pop("chunk_s")
        row.update(ttft=self.ttft, tpot=self.tpot, e2e=self.e2e, lag=self.lag, chunks=len(self.chunk_s))
        return row
