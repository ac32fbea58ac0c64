"""The diagnosis rendered for people: terminal text and markdown, with and without a verdict."""

import io

from rich.console import Console

from advisor.diagnosis import SLO, diagnose, load_rules
from advisor.diagnosis.model import CheckSkip, ExperimentRef
from advisor.experiments.result import ExperimentResult, Judgement, Look, MetricResult, ServerRow
from advisor.reports.diagnosis_text import render as render_text
from advisor.reports.markdown import diagnosis as markdown_diagnosis
from tests.unit.test_rules import snapshot_for

CASE = {"signals": {"ttft_p95": 2.0, "tpot_p95": 0.02, "queue_time_mean": 1.5, "ttft_mean": 1.8,
                    "requests_waiting_avg": 6}}
PRIMARY = MetricResult(metric="ttft", statistic="p95", lower_is_better=True, baseline_value=20.9,
                       candidate_value=12.9, ratio=0.70, ci=(0.6, 0.82), level=0.997, p_value=0.001,
                       adjusted_p=0.001, verdict="improved", method="block bootstrap", n_blocks=(4, 4),
                       n_samples=(268, 268), margin=0.05, reason="")


def experiment(**judged) -> ExperimentResult:
    """The check's experiment as the store keeps it: its judgement with the run."""
    fields = dict(verdict="improved", primary_metric="ttft p95", ratio=0.5, ci=(0.4, 0.6))
    fields.update(judged)
    return ExperimentResult(id="exp-1", deployment="local", mechanism="max_num_seqs", value="8", status="finished",
                            baseline_restored=True, fails_means="x", manifest={"workload": {"source": "telemetry"}},
                            judgement=Judgement(**fields))


def diagnosis(result: ExperimentResult | None = None):
    d = diagnose(snapshot_for(CASE), load_rules(), SLO())
    if result is not None:
        d.checks[0].verdict = ExperimentRef(experiment=result.id, verdict=result.verdict)
    return d


def text_of(d, *results) -> str:
    buf = io.StringIO()
    render_text(d, Console(file=buf, width=400), results)
    return buf.getvalue()


def test_a_check_refers_to_its_experiment_by_key_and_reads_earlier_copies_as_a_reference():
    from advisor.diagnosis.model import Diagnosis

    d = diagnosis(experiment())
    d.checks[1].verdict = CheckSkip(skipped="held back")
    data = d.model_dump(mode="json")
    by_rank = {c["rank"]: c["verdict"] for f in data["findings"] for c in f["checks"]}
    assert by_rank[1] == {"experiment": "exp-1", "verdict": "improved"}, "a reference, not a copy of the result"
    assert by_rank[2] == {"skipped": "held back"}
    back = Diagnosis.model_validate(data)
    assert isinstance(back.checks[0].verdict, ExperimentRef) and isinstance(back.checks[1].verdict, CheckSkip)
    # A diagnosis stored by an earlier advisor carried a copy of the result's fields: read as its key.
    checks = [c for f in data["findings"] for c in f["checks"]]
    checks[0]["verdict"] = {"verdict": "improved", "primary_metric": "ttft p95", "ratio": 0.5, "ci": [0.4, 0.6],
                            "value": "8", "experiment": "exp-1", "status": "finished", "metrics": []}
    old = Diagnosis.model_validate(data)
    assert old.checks[0].verdict == ExperimentRef(experiment="exp-1", verdict="improved")


def test_an_inconclusive_verdict_says_why_in_text_and_markdown():
    why = "4 of 6 baseline blocks had an invalid load generator (lag); at least 3 valid blocks per arm are needed"
    r = experiment(verdict="inconclusive", ratio=None, ci=None, reason=why)
    text = text_of(diagnosis(r), r)
    assert "INCONCLUSIVE" in text and "invalid load generator" in text
    md = markdown_diagnosis(diagnosis(r), [r])
    assert "**inconclusive** on ttft p95 (4 of 6 baseline blocks had an invalid load generator" in md


def test_markdown_has_symptom_checks_and_verdict():
    r = experiment()
    md = markdown_diagnosis(diagnosis(r), [r])
    assert "## ADV001 TTFT is high while TPOT is normal (moderate)" in md
    assert "| 1 | Requests wait in the queue" in md
    assert r"**improved** on ttft p95, ratio 0.50, 95 % CI \[0.40, 0.60\]" in md  # brackets escaped: text, not a link


def test_text_has_evidence_and_the_experiment_line():
    r = experiment()
    out = text_of(diagnosis(r), r)
    assert "MODERATE ADV001" in out and "ttft_p95 = 2.000 s > SLO ttft_p95 (1.000 s)" in out
    assert ("Experiment for check #1 (max_num_seqs -> 8): IMPROVED on ttft p95, ratio 0.50, 95 % CI [0.40, 0.60]; "
            "finished, baseline restored and healthy") in out
    assert "workload: telemetry" in out


def test_a_check_whose_result_is_not_at_hand_shows_its_verdict_and_key():
    d = diagnosis(experiment())
    out = text_of(d)
    assert "IMPROVED (experiment exp-1: its result is not at hand)" in out
    assert "**improved** (experiment exp-1: its result is not at hand)" in markdown_diagnosis(d)


def test_healthy_text():
    buf = io.StringIO()
    healthy = diagnose(snapshot_for({"signals": {"ttft_p95": 0.2, "tpot_p95": 0.01}}), load_rules(), SLO())
    render_text(healthy, Console(file=buf, width=160))
    assert "Healthy" in buf.getvalue()


def test_where_the_experiment_stopped_is_in_text_and_markdown():
    r = experiment(metrics=[PRIMARY], ratio=0.55, ci=(0.4, 0.8),
                   looks=[Look(blocks=3, alpha=0.001, verdict="inconclusive", ratio=0.6, ci=(0.2, 1.9), requests=402),
                          Look(blocks=4, alpha=0.003, verdict="improved", ratio=0.55, ci=(0.4, 0.8), requests=536)],
                   stop_reason="decisive at look 2 (4 of at most 13 blocks per arm): improved")
    text = text_of(diagnosis(r), r)
    assert "99.7 % CI [0.40, 0.80]" in text and "stopped: decisive at look 2 (4 of at most 13 blocks per arm)" in text
    assert "2 looks, 536 requests" in text
    md = markdown_diagnosis(diagnosis(r), [r])
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
    r = experiment(metrics=[PRIMARY]).model_copy(update={
        "server": [ServerRow(signal="requests_running_avg", baseline=2.0, candidate=7.9, watched=True),
                   ServerRow(signal="prefix_cache_hit_rate", baseline=None, candidate=0.81, watched=False)],
        "server_notes": ["outside traffic on the baseline: 12 requests the advisor did not send"]})
    text = text_of(diagnosis(r), r)
    assert "client, baseline -> candidate: ttft p95 20.9 s -> 12.9 s (0.70, improved)" in text, text
    assert "server, baseline -> candidate: requests_running_avg* 2 -> 7.9; prefix_cache_hit_rate - -> 81.0 %" in text
    assert "outside traffic on the baseline: 12 requests" in text
    md = markdown_diagnosis(diagnosis(r), [r])
    assert "## Experiment exp-1: max_num_seqs -> 8" in md
    assert "| ttft p95 | 20.9 s | 12.9 s | 0.70 |" in md, md
    assert "| `requests_running_avg` \\* | 2 | 7.9 | x3.95 |" in md
    assert "> outside traffic on the baseline: 12 requests the advisor did not send" in md


def test_the_local_demo_prints_the_experiment_it_just_ran(monkeypatch, capsys, tmp_path):
    """`scripts/run-local.sh` prints the diagnosis as `advisor diagnose` does: the top check's verdict
    with its ratio and interval from the result just run, never "its result is not at hand"."""
    import advisor.localstack.__main__ as demo
    from advisor.app.diagnose import DiagnoseOutcome

    r = experiment()
    d = diagnosis(r)
    monkeypatch.setattr(demo, "diagnose", lambda request, say: DiagnoseOutcome(
        diagnosis=d, snapshot=snapshot_for(CASE), deployment=None, experiments=(r,)))
    spec = tmp_path / "dep.yaml"
    spec.write_text("name: local\n")
    assert demo.run_diagnosis("http://127.0.0.1:9", 60, spec) == 0
    out = capsys.readouterr().out
    assert "not at hand" not in out, out
    assert "IMPROVED" in out and "ratio 0.50" in out, out
