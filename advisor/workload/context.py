"""Whether a workload's requests fit the target's context window.

A request whose prompt and answer together pass the engine's context (vLLM's max_model_len) is
refused by the engine with an HTTP 400: every such request is an error, and an experiment would
end in its error guardrail after its first block, or a load run report an error rate that is the
workload's fault, not the deployment's. So the plan is checked before anything is sent, and the
refusal names the bucket, the sizes and where the limit was read.
"""

from __future__ import annotations

from collections.abc import Sequence

from advisor.workload.plan import PlannedRequest
from advisor.workload.spec import WorkloadError


def check_fits(requests: Sequence[PlannedRequest], context: int | None, where: str) -> None:
    """WorkloadError when a planned request needs more tokens than `context` (None: unknown, so
    nothing is refused). where: the limit's source, e.g. 'max_model_len of http://h:8000/v1/models'."""
    if not context:
        return
    over = [r for r in requests if r.prompt_tokens + r.output_tokens > context]
    if not over:
        return
    worst = max(over, key=lambda r: r.prompt_tokens + r.output_tokens)
    buckets = sorted({r.bucket for r in over})
    raise WorkloadError(
        f"{len(over):,} of {len(requests):,} planned requests need more tokens than the target's context of "
        f"{context:,} ({where}): the longest, in bucket {worst.bucket!r}, is a {worst.prompt_tokens:,}-token prompt "
        f"with a {worst.output_tokens:,}-token answer; the engine would refuse each one. Shorten "
        f"prompt_tokens or output_tokens of bucket{'s' if len(buckets) > 1 else ''} "
        f"{', '.join(repr(b) for b in buckets[:5])}{' ...' if len(buckets) > 5 else ''}")
