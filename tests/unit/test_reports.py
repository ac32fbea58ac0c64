"""The diagnosis rendered for people: terminal text and markdown, with and without a verdict."""

import io

from rich.console import Console

from advisor.diagnosis import SLO, diagnose, load_rules
from advisor.reports.diagnosis_text import render as render_text
from advisor.reports.markdown import render as render_md
from tests.unit.test_rules import snapshot_for

CASE = {"signals": {"ttft_p95": 2.0, "tpot_p95": 0.02, "queue_time_mean": 1.5, "ttft_mean": 1.8,
                    "requests_waiting_avg": 6}}


def diagnosis(with_verdict: bool):
    d = diagnose(snapshot_for(CASE), load_rules(), SLO())
    if with_verdict:
        d.checks[0].verdict = {"verdict": "improved", "primary_metric": "ttft p95", "ratio": 0.5, "ci": [0.4, 0.6],
                               "value": "8", "experiment": "exp-1", "status": "finished", "baseline_restored": True,
                               "fails_means": "x", "workload": "telemetry"}
    return d


def test_markdown_has_symptom_checks_and_verdict():
    md = render_md("diagnosis.md.j2", d=diagnosis(True))
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
