"""The diagnosis rendered for people: terminal text and markdown, with and without a verdict."""

import io

from rich.console import Console

from advisor.diagnosis import SLO, diagnose, load_rules
from advisor.experiments.result import CheckSkip, CheckVerdict
from advisor.reports.diagnosis_text import render as render_text
from advisor.reports.markdown import diagnosis as markdown_diagnosis
from tests.unit.test_rules import snapshot_for

CASE = {"signals": {"ttft_p95": 2.0, "tpot_p95": 0.02, "queue_time_mean": 1.5, "ttft_mean": 1.8,
                    "requests_waiting_avg": 6}}


def diagnosis(with_verdict: bool):
    d = diagnose(snapshot_for(CASE), load_rules(), SLO())
    if with_verdict:
        d.checks[0].verdict = CheckVerdict(verdict="improved", primary_metric="ttft p95", ratio=0.5, ci=(0.4, 0.6),
                                           value="8", experiment="exp-1", status="finished", baseline_restored=True,
                                           fails_means="x", workload="telemetry")
    return d


def test_check_verdict_is_typed_and_keeps_its_json_field_names():
    from advisor.diagnosis.model import Diagnosis

    d = diagnosis(True)
    d.checks[1].verdict = CheckSkip(skipped="held back")
    data = d.model_dump(mode="json")
    checks = [c for f in data["findings"] for c in f["checks"]]
    by_rank = {c["rank"]: c["verdict"] for c in checks}
    assert by_rank[1]["verdict"] == "improved" and by_rank[1]["ci"] == [0.4, 0.6] and by_rank[1]["experiment"] == "exp-1"
    assert by_rank[2] == {"skipped": "held back"}
    back = Diagnosis.model_validate(data)
    assert isinstance(back.checks[0].verdict, CheckVerdict) and isinstance(back.checks[1].verdict, CheckSkip)


def test_an_inconclusive_verdict_says_why_in_text_and_markdown():
    d = diagnosis(True)
    d.checks[0].verdict = d.checks[0].verdict.model_copy(update={
        "verdict": "inconclusive", "ratio": None, "ci": None,
        "reason": "4 of 6 baseline blocks had an invalid load generator (lag); at least 3 valid blocks per arm are needed"})
    buf = io.StringIO()
    render_text(d, Console(file=buf, width=200))
    assert "INCONCLUSIVE" in buf.getvalue() and "invalid load generator" in buf.getvalue()
    md = markdown_diagnosis(d)
    assert "**inconclusive** on ttft p95 (4 of 6 baseline blocks had an invalid load generator" in md


def test_markdown_has_symptom_checks_and_verdict():
    md = markdown_diagnosis(diagnosis(True))
    assert "## ADV001 TTFT is high while TPOT is normal (moderate)" in md
    assert "| 1 | Requests wait in the queue" in md
    assert "**improved** on ttft p95, ratio 0.50 [0.40, 0.60]" in md


def test_text_has_evidence_and_the_experiment_line():
    buf = io.StringIO()
    render_text(diagnosis(True), Console(file=buf, width=160))
    out = buf.getvalue()
    assert "MODERATE ADV001" in out and "ttft_p95 = 2.000 s > SLO ttft_p95 (1.000 s)" in out
    assert "Experiment for check #1 (max_num_seqs -> 8): IMPROVED on ttft p95" in out


def test_healthy_text():
    buf = io.StringIO()
    healthy = diagnose(snapshot_for({"signals": {"ttft_p95": 0.2, "tpot_p95": 0.01}}), load_rules(), SLO())
    render_text(healthy, Console(file=buf, width=160))
    assert "Healthy" in buf.getvalue()


def test_where_the_experiment_stopped_is_in_text_and_markdown():
    from advisor.experiments.result import Look

    d = diagnosis(True)
    d.checks[0].verdict = d.checks[0].verdict.model_copy(update={
        "looks": [Look(blocks=3, alpha=0.001, verdict="inconclusive", ratio=0.6, ci=(0.2, 1.9), requests=402),
                  Look(blocks=4, alpha=0.003, verdict="improved", ratio=0.55, ci=(0.4, 0.8), requests=536)],
        "stop_reason": "decisive at look 2 (4 of at most 13 blocks per arm): improved", "level": 0.997})
    buf = io.StringIO()
    render_text(d, Console(file=buf, width=200))
    text = buf.getvalue()
    assert "99.7% CI" in text and "stopped: decisive at look 2 (4 of at most 13 blocks per arm)" in text
    assert "2 looks, 536 requests" in text
    md = markdown_diagnosis(d)
    assert "stopped: decisive at look 2" in md


def test_the_tokenization_timed_is_a_line_of_every_report_and_its_endpoint_is_escaped():
    from advisor.reports.documents import diagnosis_document
    from advisor.workload.tokenize_cost import TokenizationCost, TokenizePoint

    snap = snapshot_for({**CASE, "signals": {**CASE["signals"], "prompt_len_mean": 900}})
    cost = TokenizationCost(endpoint="POST http://engine<b>x</b>:8000/tokenize", model="m", rounds=7, base_s=0.003,
                            points=[TokenizePoint(length_of="prompt_len_mean", prompt_tokens=900, round_trip_s=0.012,
                                                  cost_s=0.009)], ttft_mean_s=1.8, share=0.009 / 1.8)
    d = diagnose(snap, load_rules(), SLO(), tokenization=cost)
    check = next(c for c in d.checks if c.id == "tokenization")
    assert check.strength is not None and check.evidence[0].source.startswith("POST http://engine<b>x</b>:8000/tokenize")
    line = "tokenizing takes 9.00 ms at 900 tokens (prompt_len_mean): 0.5 % of the mean TTFT"
    buf = io.StringIO()
    render_text(d, Console(file=buf, width=400))
    assert line in buf.getvalue()
    md = markdown_diagnosis(d)
    assert line in md and "<b>x</b>" not in md
    html = diagnosis_document(d, "html")
    assert line in html and "engine&lt;b&gt;x&lt;/b&gt;" in html and "<b>x</b>" not in html
    untimed = diagnose(snap, load_rules(), SLO(), tokenization_note="no engine URL to time /tokenize at")
    assert "Tokenization: not measured: no engine URL" in markdown_diagnosis(untimed)
    assert next(c for c in untimed.checks if c.id == "tokenization").score == 0


def test_the_cost_is_a_line_of_every_report_and_absent_without_a_price():
    from advisor.cost import Price, PriceSpec, diagnosis_cost
    from advisor.reports.documents import diagnosis_document

    snap = snapshot_for({**CASE, "signals": {**CASE["signals"], "generation_tokens_per_s": 500.0,
                                             "request_rate": 2.0}})
    d = diagnose(snap, load_rules(), SLO())
    price = Price(spec=PriceSpec(per_hour=0.8, per="host", currency="EUR"), source="deployment spec <b>d</b>.yaml")
    d.cost, d.cost_note = diagnosis_cost(snap, SLO(), price)
    line = "EUR 0.80 per host-hour x 1 (one host) = EUR 0.80/h; EUR 0.44 per million output tokens at 500.0 tokens/s"
    buf = io.StringIO()
    render_text(d, Console(file=buf, width=400))
    assert line in buf.getvalue()
    assert line in markdown_diagnosis(d) and line in diagnosis_document(d, "html")
    bare = diagnose(snap, load_rules(), SLO())
    bare.cost, bare.cost_note = diagnosis_cost(snap, SLO(), None)
    buf = io.StringIO()
    render_text(bare, Console(file=buf, width=400))
    assert "cost" not in buf.getvalue().lower() and "Cost:" not in markdown_diagnosis(bare)
    assert "Cost:" not in diagnosis_document(bare, "html")


def test_a_bad_price_is_refused_before_the_target_is_read():
    from tests.support.cli import assert_one_line_error, run_cli

    r = run_cli("diagnose", "--prom-url", "http://127.0.0.1:9", "--price-per-hour", "cheap")
    assert_one_line_error(r, contains="--price-per-hour 'cheap': expected a positive number")


def test_each_experiment_shows_client_and_server_readouts_per_arm_in_text_and_markdown():
    from advisor.experiments.result import MetricResult, ServerRow

    primary = MetricResult(metric="ttft", statistic="p95", lower_is_better=True, baseline_value=20.9,
                           candidate_value=12.9, ratio=0.70, ci=(0.6, 0.82), level=0.997, p_value=0.001,
                           adjusted_p=0.001, verdict="improved", method="block bootstrap", n_blocks=(4, 4),
                           n_samples=(268, 268), margin=0.05, reason="")
    d = diagnosis(True)
    d.checks[0].verdict = d.checks[0].verdict.model_copy(update={
        "metrics": [primary],
        "server": [ServerRow(signal="requests_running_avg", baseline=2.0, candidate=7.9, watched=True),
                   ServerRow(signal="prefix_cache_hit_rate", baseline=None, candidate=0.81, watched=False)],
        "server_notes": ["outside traffic on the baseline: 12 requests the advisor did not send"]})
    buf = io.StringIO()
    render_text(d, Console(file=buf, width=400))
    text = buf.getvalue()
    assert "client, baseline -> candidate: ttft p95 20.9 s -> 12.9 s (0.70, improved)" in text, text
    assert "server, baseline -> candidate: requests_running_avg* 2 -> 7.9; prefix_cache_hit_rate - -> 81.0 %" in text
    assert "outside traffic on the baseline: 12 requests" in text
    md = markdown_diagnosis(d)
    assert "## Experiment exp-1: max_num_seqs -> 8" in md
    assert "| ttft p95 | 20.9 s | 12.9 s | 0.70 |" in md, md
    assert "| `requests_running_avg` \\* | 2 | 7.9 | x3.95 |" in md
    assert "> outside traffic on the baseline: 12 requests the advisor did not send" in md
