"""Per-bucket readouts: a candidate that speeds up long prompts' prefill only shows it in that
bucket's TTFT, while the short bucket and decode (TPOT) stay unchanged."""

from __future__ import annotations

import random

from advisor.experiments.result import ExperimentResult
from advisor.experiments.judgement.judge import per_bucket
from advisor.loadgen.record import RequestRecord
from advisor.reports import markdown, views


def records(arm: str, block: int, rng: random.Random) -> list[RequestRecord]:
    out = []
    for i in range(24):
        long = i % 2 == 0
        ttft = (0.8 if long and arm == "baseline" else 0.4 if long else 0.1) * rng.uniform(0.95, 1.05)
        tpot = 0.02 * rng.uniform(0.95, 1.05)
        r = RequestRecord(index=block * 100 + i, bucket="long-prompt" if long else "short-prompt",
                          prompt_tokens=1024 if long else 64, max_tokens=16, scheduled_s=0.0, sent_s=0.0,
                          first_token_s=ttft, last_token_s=ttft + 15 * tpot, output_tokens=16, status="ok")
        out.append(r)
    return out


def test_only_the_long_prompts_prefill_changes():
    rng = random.Random(3)
    by_block = {(arm, b): records(arm, b, rng) for b in range(6) for arm in ("baseline", "candidate")}
    result = per_bucket(by_block, 0.05)
    found = {b.bucket: {m.metric: m for m in b.metrics} for b in result}
    assert found["long-prompt"]["ttft"].verdict == "improved" and 0.45 < found["long-prompt"]["ttft"].ratio < 0.55
    assert found["short-prompt"]["ttft"].verdict in ("no change", "inconclusive")
    assert found["long-prompt"]["tpot"].verdict in ("no change", "inconclusive")
    assert result[0].requests == (72, 72)
    r = ExperimentResult(id="e", deployment="d", mechanism="max_num_batched_tokens", value="4096", status="finished",
                         verdict="improved", primary_metric="ttft p50", ratio=0.7, ci=(0.6, 0.8), buckets=result)
    md = markdown.experiment(views.experiment_view(r, charts_on=False))
    assert "| long-prompt | 72 / 72 | 0.5" in md and "improved |" in md


def test_one_bucket_has_nothing_to_tell_apart():
    rng = random.Random(1)
    by_block = {(arm, b): [x for x in records(arm, b, rng) if x.bucket == "short-prompt"]
                for b in range(4) for arm in ("baseline", "candidate")}
    assert per_bucket(by_block, 0.05) == []
