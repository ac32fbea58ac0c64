"""One readout vocabulary: every readout the knob catalog names is measured and judged by the
runner (on synthetic records), block readouts come from each block's own duration, and blocks whose
load generator fell behind are not judged."""

from types import SimpleNamespace

import pytest

from advisor import readout_vocabulary
from advisor.experiments.judgement import judge as judgement
from advisor.experiments.design import readouts
from advisor.experiments.design.plan import SIGNAL_READOUT
from advisor.experiments.result import BlockRecord
from advisor.knobs import KNOBS
from advisor.loadgen.record import RequestRecord

CATALOG_READOUTS = sorted({(r.metric, r.statistic) for k in KNOBS.values() for r in k.readouts})


def _block(scale: float, block: int, n: int = 24, errors: int = 0, slow: int = 0) -> list[RequestRecord]:
    """n requests sent 0.1*scale s apart, each 10 tokens at 0.02*scale s apart after a TTFT of
    0.2*scale s (`slow` of them 1.5 s, beyond the default TTFT SLO); `errors` more that failed."""
    jitter = 1 + 0.01 * block
    recs = []
    for i in range(n):
        sent = i * 0.1 * scale * jitter
        ttft = 1.5 if i < slow else 0.2 * scale * jitter * (1 + 0.02 * (i % 5))
        chunks = [sent + ttft + j * 0.02 * scale * jitter * (1 + 0.01 * (i % 3)) for j in range(10)]
        recs.append(RequestRecord(index=i, bucket="b", prompt_tokens=100, max_tokens=10, scheduled_s=None,
                                  sent_s=sent, first_token_s=chunks[0], last_token_s=chunks[-1], chunk_s=chunks,
                                  output_tokens=10, status="ok"))
    for i in range(errors):
        recs.append(RequestRecord(index=n + i, bucket="b", prompt_tokens=100, max_tokens=10, scheduled_s=None,
                                  sent_s=0.05 * i, status="error", error="boom"))
    return recs


def _by_block(blocks: int = 6):
    out = {}
    for b in range(blocks):
        out[("baseline", b)] = _block(2.0, b, errors=4, slow=10)
        out[("candidate", b)] = _block(1.0, b)
    return out


def test_every_catalog_readout_is_known_to_the_judge():
    """The meta-test: a catalog entry naming a readout the judge does not measure fails here."""
    for name, k in KNOBS.items():
        for r in k.readouts:
            assert readouts.known(r.metric, r.statistic), f"{name}: the judge does not know {r.metric} {r.statistic}"
            assert (r.better == "lower") == readout_vocabulary.lower_is_better(r.metric), f"{name}: {r.metric} is {r.better}?"


def test_every_signal_readout_is_in_the_vocabulary():
    for signal, (metric, statistic) in SIGNAL_READOUT.items():
        assert readouts.known(metric, statistic), signal


@pytest.mark.parametrize("readout", CATALOG_READOUTS, ids=lambda r: f"{r[0]}-{r[1]}")
def test_the_judge_runs_every_catalog_readout(readout):
    design = SimpleNamespace(primary=readout, secondary=[])
    [result] = judgement.judge_readouts(design, _by_block())
    assert (result.metric, result.statistic) == readout
    assert result.verdict == "improved", result.reason
    assert result.n_blocks == (6, 6)


def test_the_design_reads_the_catalogs_own_secondary_list():
    from advisor.experiments.run.setup import secondary_readouts

    knob = KNOBS["max_num_seqs"]
    primary = (knob.primary.metric, knob.primary.statistic)
    assert secondary_readouts(knob, primary) == [(r.metric, r.statistic) for r in knob.secondary]
    # another primary (a check's readout): the knob's own primary is measured as a secondary
    other = secondary_readouts(knob, ("ttft", "p50"))
    assert other[0] == primary and ("ttft", "p50") not in other


def test_all_readouts_of_a_knob_judged_together_with_holm():
    knob = KNOBS["max_num_seqs"]
    primary = (knob.primary.metric, knob.primary.statistic)
    design = SimpleNamespace(primary=primary, secondary=[(r.metric, r.statistic) for r in knob.secondary])
    results = judgement.judge_readouts(design, _by_block())
    assert [(m.metric, m.statistic) for m in results] == [primary, *design.secondary]
    assert all(m.verdict == "improved" for m in results), [(m.metric, m.reason) for m in results]


def test_block_readouts_use_the_blocks_own_duration():
    recs = _block(1.0, 0, n=24)
    # first send at 0, last completion at 23 * 0.1 + 0.2 * (1 + 0.02 * 3) + 9 * 0.02 * (1 + 0.01 * 2)
    duration = readouts.block_duration(recs)
    assert duration == pytest.approx(2.3 + 0.2 * 1.06 + 9 * 0.02 * 1.02)
    assert readouts.block_value(recs, "throughput") == pytest.approx(24 / duration)
    assert readouts.block_value(recs, "output_tokens") == pytest.approx(240 / duration)
    assert readouts.block_value(recs, "goodput") == pytest.approx(24 / duration)
    slow = _block(1.0, 0, n=24, slow=4)
    assert readouts.block_value(slow, "goodput") == pytest.approx(20 / readouts.block_duration(slow))
    # errors: half a pseudo-count, so an error-free block has a defined, small ratio
    assert readouts.block_value(recs, "errors") == pytest.approx(0.5 / 25)
    assert readouts.block_value(_block(1.0, 0, n=6, errors=4), "errors") == pytest.approx(4.5 / 11)
    assert readouts.block_samples(recs, "throughput", "per_s") == [pytest.approx(24 / duration)]
    nothing = [RequestRecord(index=0, bucket="b", prompt_tokens=1, max_tokens=1, scheduled_s=0.0)]
    assert readouts.block_value(nothing, "throughput") is None and readouts.block_value(nothing, "errors") is None


def test_two_error_free_arms_are_no_change_not_a_crash():
    design = SimpleNamespace(primary=("errors", "ratio"), secondary=[])
    by_block = {(arm, b): _block(1.0 if arm == "candidate" else 1.1, b) for arm in ("baseline", "candidate")
                for b in range(6)}
    [result] = judgement.judge_readouts(design, by_block)
    assert result.verdict == "no change" and result.ratio == pytest.approx(1.0)


def test_an_unknown_readout_is_refused():
    with pytest.raises(ValueError, match="unknown readout"):
        readouts.block_samples([], "output_tokens", "mean")


def _rec(arm, block, valid=True):
    return BlockRecord(arm=arm, block=block, requests=10, ok=10, errors=0, ttft_p50=0.1, tpot_p50=0.01,
                       e2e_p95=0.5, generator_valid=valid, why_invalid=None if valid else "scheduling lag p99 300 ms")


def test_too_many_invalid_blocks_make_the_verdict_inconclusive():
    ok = [_rec(a, b) for b in range(6) for a in ("baseline", "candidate")]
    assert judgement.too_few_valid(ok) is None
    # 3 of 6 invalid: half still valid, and at least 2
    half = [_rec(a, b, valid=not (a == "baseline" and b < 3)) for b in range(6) for a in ("baseline", "candidate")]
    assert judgement.too_few_valid(half) is None
    most = [_rec(a, b, valid=not (a == "baseline" and b < 4)) for b in range(6) for a in ("baseline", "candidate")]
    why = judgement.too_few_valid(most)
    assert why and ("2 valid baseline blocks of 6 (3 needed): the load generator fell behind its schedule on the "
                    "baseline arm (scheduling lag p99 300 ms)") in why
    two = [_rec(a, b, valid=not (a == "candidate" and b == 0)) for b in range(2) for a in ("baseline", "candidate")]
    assert "1 valid candidate blocks of 2 (2 needed)" in judgement.too_few_valid(two)


def test_urgent_readouts_judge_only_the_most_urgent_priority_class():
    recs = _block(1.0, 0)
    for r in recs:
        r.priority = 0 if r.index % 4 == 0 else 5
        if r.priority == 5:
            r.first_token_s += 3.0  # the batch class waits; the interactive one does not
    urgent = readouts.request_values(recs, "urgent_ttft")
    assert len(urgent) == 6 and max(urgent) < 1.0
    assert len(readouts.request_values(recs, "ttft")) == 24
    for r in recs:
        r.priority = None  # a workload without priorities: every request is the urgent class
    assert readouts.request_values(recs, "urgent_ttft") == readouts.request_values(recs, "ttft")


def test_priorities_travel_from_the_bucket_to_the_request_body():
    from advisor.loadgen import client
    from advisor.workload.plan import plan
    from advisor.workload.spec import Workload

    w = Workload.model_validate({"buckets": [{"name": "i", "prompt_tokens": 10, "output_tokens": 4, "priority": 0},
                                             {"name": "b", "prompt_tokens": 10, "output_tokens": 4, "priority": 3},
                                             {"name": "n", "prompt_tokens": 10, "output_tokens": 4}],
                                 "arrival": {"kind": "concurrency", "concurrency": 2}, "requests": 60})
    by_bucket = {r.bucket: r.priority for r in plan(w)}
    assert by_bucket == {"i": 0, "b": 3, "n": None}
    assert client.body("completions", "m", "p", 4, priority=3)["priority"] == 3
    assert "priority" not in client.body("completions", "m", "p", 4)


def test_the_default_scheduling_policy_workload_has_two_classes_in_a_deep_queue():
    from advisor.experiments.design.plan import default_workload
    from advisor.experiments.run.setup import default_concurrency

    w = default_workload("scheduling_policy", 32, default_concurrency("scheduling_policy", "priority"), 1)
    assert {b.name: b.priority for b in w.buckets} == {"interactive": 0, "batch": 1}
    assert w.arrival.concurrency == 16
