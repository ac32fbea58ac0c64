"""The judgement: one typed Judgement from an experiment's blocks, the quality guard, the memory
readouts and the price; the only place a verdict is decided, and what every view shows of a stored
result without recomputing it."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from advisor.cost import Price, PriceSpec, Pricing
from advisor.experiments.judgement import judge as judgement
from advisor.experiments import stats
from advisor.experiments.design.plan import Stopping
from advisor.experiments.result import BlockRecord, ExperimentResult, QualityGuard
from advisor.loadgen.record import RequestRecord

REQUESTS = 48  # per block
SLOW = 43  # baseline requests per block that miss the TTFT SLO (1 s): 5 of 48 meet it, the candidate's 48


def block(arm: str, b: int, rng: random.Random, tpot: float = 0.02) -> list[RequestRecord]:
    """A block of ~10 s. The candidate answers in 0.2 s; the baseline queues most of its requests
    past the TTFT SLO, so that the candidate's goodput is 48/5 = 9.6 times the baseline's. The last
    request is alike on both arms and ends last: each block lasts as long, and serves as many
    tokens per second."""
    out = []
    for i in range(REQUESTS):
        t = i * 10.0 / REQUESTS
        last = i == REQUESTS - 1
        slow = arm == "baseline" and i < SLOW
        ttft = 0.2 if last else (1.2 if slow else 0.5 if arm == "baseline" else 0.2) * rng.uniform(0.9, 1.1)
        decode = 15 * (0.09 if last else tpot)  # within the TPOT SLO (0.1 s)
        out.append(RequestRecord(index=b * 1000 + i, bucket="b", prompt_tokens=64, max_tokens=16, scheduled_s=t,
                                 sent_s=t, first_token_s=t + ttft, last_token_s=t + ttft + decode,
                                 output_tokens=16, status="ok"))
    return out


def run(blocks_per_arm: int = 6, seed: int = 5, tpot: dict | None = None, memory: dict | None = None):
    """(by_block, BlockRecords) as a runner keeps them."""
    rng = random.Random(seed)
    by_block, records = {}, []
    for b in range(blocks_per_arm):
        for arm in ("baseline", "candidate"):
            recs = block(arm, b, rng, (tpot or {}).get(arm, 0.02))
            by_block[(arm, b)] = recs
            records.append(BlockRecord(arm=arm, block=b, requests=len(recs), ok=len(recs), errors=0, ttft_p50=None,
                                       tpot_p50=None, e2e_p95=None, generator_valid=True,
                                       **(memory or {}).get(arm, {})))
    return by_block, records


def design(blocks_per_arm: int = 6, secondary=(("goodput", "per_s"), ("output_tokens", "per_s")),
           sequential: bool = False, models: dict | None = None):
    """What the judgement reads of a Design: its readouts, stopping rule, maximum and failure meaning."""
    stopping = (Stopping(sequential=True, alpha=0.05, first_look=3,
                         levels=stats.boundary_alphas(3, blocks_per_arm, 0.05, "wang-tsiatis"))
                if sequential else Stopping(sequential=False, alpha=0.05))
    return SimpleNamespace(primary=("ttft", "p50"), secondary=list(secondary), stopping=stopping,
                           blocks_per_arm=blocks_per_arm, fails_means="more slots did not cut the queue",
                           models=models or {})


def final_look(d, by_block, records):
    return judgement.look(d, by_block, records, d.blocks_per_arm, sent=2 * d.blocks_per_arm * REQUESTS)


def test_the_judgement_decides_the_primary_and_its_secondaries_once():
    d = design()
    by_block, records = run()
    j = judgement.judge(d, by_block, records, looks=[final_look(d, by_block, records)])
    primary, goodput, tokens = j.metrics
    assert (j.verdict, j.primary_metric, j.ratio, j.ci) == ("improved", "ttft p50", primary.ratio, primary.ci)
    assert j.level == 0.95 and j.reason == primary.reason
    assert goodput.verdict == "improved" and goodput.ratio == pytest.approx(9.6, rel=0.1)
    assert goodput.level == 0.975, "a secondary at its Holm rank's level"
    assert tokens.verdict == "no change", "both arms served the same tokens in the same time"
    assert j.stop_reason == "reached the planned maximum of 6 blocks per arm (fixed horizon)"


def test_a_quality_past_its_margin_overrules_a_faster_candidate():
    d = design()
    by_block, records = run()
    guard = QualityGuard(prompts=40, exact_match=0.1, token_agreement=0.3, note="38 of 40 greedy outputs differ",
                         logprob_diff=-0.6, logprob_ci=(-0.8, -0.4), margin=0.1, verdict="past margin")
    j = judgement.judge(d, by_block, records, looks=[final_look(d, by_block, records)], quality=guard)
    assert j.metrics[0].verdict == "improved", "the speed readout itself stays as measured"
    assert j.verdict == "regressed" and j.overrule.by == "quality" and j.overrule.was == "improved"
    assert j.reason == "quality regressed past its margin: 38 of 40 greedy outputs differ" and j.quality == guard
    unclear = guard.model_copy(update={"verdict": "unclear", "logprob_ci": (-0.2, 0.05)})
    j = judgement.judge(d, by_block, records, looks=[final_look(d, by_block, records)], quality=unclear)
    assert j.verdict == "inconclusive" and "not shown within the margin" in j.reason


def test_an_aborted_run_is_never_overruled_into_a_verdict():
    d = design()
    by_block, records = run()
    guard = QualityGuard(prompts=4, exact_match=0, token_agreement=0, note="n", verdict="past margin")
    j = judgement.judge(d, by_block, records, looks=[], aborted="guardrail: 5/48 requests failed", quality=guard)
    assert (j.verdict, j.overrule) == ("inconclusive", None)
    assert j.reason == j.stop_reason == "aborted: guardrail: 5/48 requests failed"


def test_the_memory_readouts_explain_a_model_swap_whose_memory_fell_and_tpot_did_not():
    mib = 2 ** 20
    memory = {"baseline": {"resident_bytes": 900 * mib, "weights_resident_bytes": 800 * mib},
              "candidate": {"resident_bytes": 500 * mib, "weights_resident_bytes": 400 * mib}}
    d = design(secondary=[("tpot", "p50")], models={"candidate": "q4"})
    by_block, records = run(memory=memory)
    j = judgement.judge(d, by_block, records, looks=[final_look(d, by_block, records)])
    assert j.memory.weights_ratio == pytest.approx(0.5) and j.memory.baseline_bytes == 900 * mib
    assert j.explanation.startswith("dequantization ate the gain: resident weights fell 50%")
    assert j.verdict == "improved" and j.overrule is None, "memory explains; it does not change the verdict"
    # TPOT that did fall: nothing to explain
    faster = run(tpot={"baseline": 0.04, "candidate": 0.02}, memory=memory)
    assert judgement.judge(d, *faster, looks=[final_look(d, *faster)]).explanation is None


def test_a_decisive_sequential_look_stops_the_run_and_sets_the_level_of_the_whole_judgement():
    d = design(blocks_per_arm=12, sequential=True)
    by_block, records = run(blocks_per_arm=6)
    assert judgement.look(d, by_block, records, 2, sent=0) is None, "no look before the first"
    look = judgement.look(d, by_block, records, 6, sent=576)
    assert look.alpha == d.stopping.levels[3] < 0.05 and look.verdict == "improved" and look.requests == 576
    stop = judgement.stop_at(look, 4, d.blocks_per_arm)
    assert stop == "decisive at look 4 (6 of at most 12 blocks per arm): improved"
    j = judgement.judge(d, by_block, records, looks=[look], stop_reason=stop)
    assert j.stop_reason == stop and j.looks == [look]
    assert j.metrics[0].level == pytest.approx(1 - look.alpha) and j.ci == look.ci
    assert sorted(m.level for m in j.metrics[1:]) == pytest.approx([1 - look.alpha, 1 - look.alpha / 2]), \
        "the secondaries behind it, at the Holm levels of its alpha"
    last = look.model_copy(update={"blocks": 12})
    assert judgement.stop_at(last, 10, 12) is None, "a look at the maximum ends the run by itself"


def test_the_cost_comes_from_the_throughput_the_judgement_estimated_once(monkeypatch):
    d = design()
    by_block, records = run()
    looks = [final_look(d, by_block, records)]
    made = []
    estimate = stats.estimate
    monkeypatch.setattr(stats, "estimate", lambda *a, **k: made.append(a) or estimate(*a, **k))
    price = Price(spec=PriceSpec(per_hour=3.0, per="host"), source="--price-per-hour")
    j = judgement.judge(d, by_block, records, looks=looks,
                        pricing=Pricing(price=price, units=(1, 1), units_source="one host"))
    assert len(made) == 3, "one estimate per readout: the cost compares nothing again"
    tokens = j.metrics[2]
    assert j.cost.baseline.output_tokens_per_s == tokens.baseline_value
    assert j.cost.ratio == pytest.approx(1 / tokens.ratio) and j.cost.level == 0.95
    assert j.cost.slo_ratio == pytest.approx(1 / j.metrics[1].ratio)
    # a readout the design does not judge is estimated for the cost, once
    made.clear()
    j = judgement.judge(design(secondary=()), by_block, records, looks=looks,
                        pricing=Pricing(price=price, units=(1, 1), units_source="one host"))
    assert len(made) == 3 and j.cost.ratio is not None
    assert judgement.judge(d, by_block, records, looks=[], cost_note="no GPU seen").cost_note == "no GPU seen"


def test_too_few_valid_blocks_is_inconclusive_with_the_cause():
    d = design(blocks_per_arm=4)
    by_block, records = run(blocks_per_arm=4)
    for r in records:
        if r.arm == "baseline" and r.block < 3:
            r.generator_valid, r.why_invalid = False, "fell behind"
    j = judgement.judge(d, by_block, records, looks=[])
    assert j.verdict == "inconclusive" and j.reason.startswith("too few valid blocks to judge")


def test_the_stored_page_shows_the_judgement_it_was_stored_with(tmp_path):
    """The stored experiment page of a run whose goodput rose 9.6x: the page shows what the
    judgement said of it (improved), read from the stored result, never recomputed from a copy."""
    from advisor.reports import documents, html, markdown
    from advisor.store import open_store

    d = design()
    by_block, records = run()
    j = judgement.judge(d, by_block, records, looks=[final_look(d, by_block, records)])
    result = ExperimentResult(id="exp-9", deployment="local", mechanism="max_num_seqs", value="8", status="finished",
                              judgement=j, blocks=records, baseline_restored=True)
    with open_store(f"sqlite:///{tmp_path / 'a.db'}") as store:
        ident = store.start_experiment("exp-9", "local", "http://h:1", "max_num_seqs", "8", {})
        store.finish_experiment(ident, result)
        stored = documents.stored_result(store.get_experiment(ident))
        view = documents.stored_experiment_view(store, ident)
        page = html.render("experiment.html.j2", x=view)
        md = markdown.experiment(documents.stored_experiment_view(store, ident, charts_on=False))
    assert stored.judgement.model_dump() == j.model_dump(), "the judgement reads back as it was decided"
    rows = {m.name: m for m in view.metrics}
    assert rows["goodput per_s"].verdict == "improved" and rows["goodput per_s"].ratio == "9.60"
    assert rows["goodput per_s"].baseline.endswith("/s") and len(view.blocks) == 12
    assert "cannot be recomputed" not in page and "not at hand" not in page
    assert "| goodput per_s | secondary |" in md and "| 9.60 |" in md
    assert view.outcome.line.startswith("improved on ttft p50, ratio ")


def test_a_look_without_enough_valid_blocks_says_why_in_its_line():
    """A look that cannot give a ratio names the arm short of valid blocks and the cause, and the
    progress line prints it with what would fix it (issue: "ratio -, CI -: inconclusive" at every
    look, with no reason)."""
    from advisor.experiments.run.runner import _look_line

    d = design(blocks_per_arm=12, sequential=True)
    by_block, records = run(blocks_per_arm=5)
    records = [r.model_copy(update={"generator_valid": False, "why_invalid": "scheduling lag p99 300 ms > 50 ms"})
               if r.arm == "baseline" and r.block > 0 else r for r in records]
    look = judgement.look(d, by_block, records, 5, sent=480)
    assert look.ratio is None and look.ci is None and look.verdict == "inconclusive"
    assert look.reason.startswith("1 valid baseline blocks of 5 (3 needed): "), look.reason
    assert "candidate" not in look.reason.split(":")[0]
    assert "fell behind its schedule on the baseline arm (scheduling lag p99 300 ms > 50 ms)" in look.reason
    assert "; to fix: " in look.reason, "what would fix it, beside why"
    line = _look_line(look, 3)
    assert line.startswith("look 3 after 5 blocks per arm: ratio -") and f"({look.reason})" in line, line
