"""Text from a target, a file or the user is shown, never obeyed: Rich markup in a label or a model
name is printed literally (and cannot crash a print), terminal control sequences never reach the
terminal, HTML and markdown syntax never render in a markdown report, and JSON output is standard.

The same table of hostile strings goes through every report (text, markdown, JSON) in-process, then
through the real command line against the fake engine serving them in /metrics, /v1/models and
/version."""

from __future__ import annotations

import dataclasses
import io
import json
import math
import re
from pathlib import Path

import pytest
from rich.console import Console

from advisor import escape
from advisor.diagnosis import SLO, diagnose, load_rules
from advisor.diagnosis.model import CheckSkip, ExperimentRef
from advisor.experiments.result import BlockRecord, ExperimentResult, QualityGuard, ServerRow
from advisor.loadgen.metrics import Dist, Generator, Stats, Summary
from advisor.reports import diagnosis_text, experiment_text, load_text, snapshot_text
from advisor.reports.markdown import code
from advisor.reports.markdown import diagnosis as markdown_diagnosis
from advisor.reports.markdown import render as render_md
from probes.snapshot import EngineInfo, GpuStatus, Replica, Signal, Snapshot
from tests.support.cli import run_cli
from tests.support.servers import fake_server
from tests.unit.test_rules import snapshot_for

FIXTURES = Path(__file__).parent.parent / "fixtures" / "vllm-0.32.0-cpu"

HOSTILE = {
    "closing tag": "[/x]",
    "opening tag": "[bold]loud",
    "rich link": "[link=http://evil.example]click[/link]",
    "sgr escape": "\x1b[31mred\x1b[0m",
    "osc title": "\x1b]0;owned\x07",
    "c1 csi": "\x9b31m",
    "html": "<script>alert(1)</script>",
    "markdown": "# head\n- item | cell `code` **bold** [a](http://evil.example) ![i](x)",
    "entities": "&lt;b&gt; &amp; <img src=x onerror=alert(1)>",
    "backslash end": "trailing\\",
    "everything": "[/x][bold]<script>\x1b[31m\x1b]0;t\x07 *md* | # x `y`",
}
CASE = {"signals": {"ttft_p95": 2.0, "tpot_p95": 0.02, "queue_time_mean": 1.5, "ttft_mean": 1.8,
                    "requests_waiting_avg": 6}}
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def hostile_snapshot(s: str) -> Snapshot:
    snap = snapshot_for(CASE)
    snap.target = f"http://{s}"
    snap.model = s
    snap.engine = EngineInfo(kind="vllm", version=s, models=[s, "ok"], config={"block_size": s,
                             "enable_prefix_caching": s}, config_source=s, problems=[s])
    snap.signals["ttft_p95"].note = s
    snap.signals["kv_cache_usage_avg"] = Signal(name="kv_cache_usage_avg", unit="ratio", source=s, missing=s)
    snap.replicas = [Replica(labels={"pod": s}, signals={}), Replica(labels={"pod": "b"}, signals={})]
    snap.gpu = GpuStatus(available=False, source=s, reason=s)
    snap.problems = [s]
    return snap


def hostile_result(s: str) -> ExperimentResult:
    """A check's experiment whose every text came from outside."""
    return ExperimentResult(id=s, deployment=s, mechanism=s, value=s, status=s, verdict="regressed", primary_metric=s,
                            ratio=1.5, ci=(1.4, 1.6), reason=s, stop_reason=s, baseline_restored=True, fails_means=s,
                            manifest={"workload": {"source": s}}, server_notes=[s])


def hostile_diagnosis(s: str):
    d = diagnose(hostile_snapshot(s), load_rules(), SLO())
    d.findings[0].evidence[0].text = s
    d.findings[0].evidence[0].source = s
    d.checks[0].verdict = ExperimentRef(experiment=s, verdict="regressed")
    d.checks[1].verdict = CheckSkip(skipped=s)
    d.checks[2].reason = s
    return d


def text_of(render, *args) -> str:
    buf = io.StringIO()
    render(*args, Console(file=buf, width=200, force_terminal=False, color_system=None))
    return buf.getvalue()


def terminal_safe(out: str) -> None:
    assert not CONTROL.search(out.replace("\n", "").replace("\t", "")), repr(out)


def shown_literally(out: str, s: str) -> None:
    """Markup and controls come out as text: every bracket, and every control as a visible escape."""
    for line in escape.plain(s).splitlines():
        assert line.strip() in out, f"{line!r} not shown literally in:\n{out}"


def strict_json(text: str):
    def refuse(token):
        raise ValueError(f"non-standard JSON token {token}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("s", list(HOSTILE.values()), ids=list(HOSTILE))
def test_snapshot_text(s):
    out = text_of(lambda snap, c: snapshot_text.render(snap, c, show_all=True), hostile_snapshot(s))
    terminal_safe(out)
    if "\n" not in s:
        shown_literally(out.replace("\n", ""), s)  # the table may fold a long value


@pytest.mark.parametrize("s", list(HOSTILE.values()), ids=list(HOSTILE))
def test_diagnosis_text(s):
    out = text_of(lambda d, console: diagnosis_text.render(d, console, [hostile_result(s)]), hostile_diagnosis(s))
    terminal_safe(out)
    assert "Experiment for check #1" in out and "note:" in out
    if "\n" not in s:
        shown_literally(out, s)


@pytest.mark.parametrize("s", list(HOSTILE.values()), ids=list(HOSTILE))
def test_diagnosis_markdown(s):
    md = markdown_diagnosis(hostile_diagnosis(s), [hostile_result(s)])
    terminal_safe(md)
    assert "<script" not in md and "<img" not in md
    assert not re.search(r"(?<!\\)\]\(", md)  # no link: every bracket is backslashed
    # No hostile line starts a block of its own: every line is one the template wrote.
    for line in md.splitlines():
        assert not line.startswith(("- item", "# head", "<")), line
    # Every table row keeps its 7 columns: no unescaped pipe splits a cell.
    rows = [line for line in md.splitlines() if line.startswith("| ") and not line.startswith("| #")]
    assert rows and all(len(re.split(r"(?<!\\)\|", r)) == 9 for r in rows), rows


@pytest.mark.parametrize("s", list(HOSTILE.values()), ids=list(HOSTILE))
def test_json_reports_are_standard(s):
    d = hostile_diagnosis(s)
    text = escape.json_text({"healthy": d.healthy, **d.model_dump(mode="json")})
    assert strict_json(text)["engine"]["version"] == s
    snap_text = escape.json_text(hostile_snapshot(s).model_dump(mode="json"))
    assert strict_json(snap_text)["model"] == s
    terminal_safe(text + snap_text)


def test_json_has_no_nan_or_infinity():
    text = escape.json_text({"a": math.nan, "b": [math.inf, -math.inf], "c": {"d": 1.5}})
    assert strict_json(text) == {"a": None, "b": [None, None], "c": {"d": 1.5}}


@pytest.mark.parametrize("s", list(HOSTILE.values()), ids=list(HOSTILE))
def test_experiment_text(s):
    r = ExperimentResult(id=s, deployment=s, mechanism=s, value=s, status="aborted", verdict="no change",
                         primary_metric=s, ratio=1.0, ci=(0.9, 1.1), aborted=s, baseline_restored=False,
                         restore_note=s, fails_means=s,
                         blocks=[BlockRecord(arm=s, block=0, requests=1, ok=1, errors=0, ttft_p50=0.1,
                                             tpot_p50=0.01, e2e_p95=1.0, generator_valid=True)],
                         quality=QualityGuard(prompts=1, exact_match=1, token_agreement=1, note=s),
                         server=[ServerRow(signal=s, baseline=1.0, candidate=2.0, watched=True)], server_notes=[s],
                         manifest={"deployment": {"engine": s, "model": s}, "engine_version": s,
                                   "hardware": {"cpu": s, "cores": 2, "gpus": [s]}, "workload": {"name": s},
                                   "concurrency_or_rate": s, "seeds": {"workload": 1}, "block_order": [s]})
    out = text_of(experiment_text.render, r)
    terminal_safe(out)
    if "\n" not in s:
        shown_literally(out.replace("\n", ""), s[:20])


@pytest.mark.parametrize("s", list(HOSTILE.values()), ids=list(HOSTILE))
def test_load_text(s):
    empty = Dist(n=0)
    stats = Stats(requests=1, ok=0, errors=1, cancelled=0, ttft=empty, tpot=empty, itl=empty, e2e=empty,
                  output_tokens=empty, goodput_rps=None, throughput_rps=None, output_tokens_per_s=None)
    summary = Summary(overall=stats, buckets={s: stats}, measured_s=1, warmup_s=0, errors_seen={s: 1}, aborted=s,
                      generator=Generator(planned_rate=None, achieved_rate=None, achieved_ratio=None, lag_p50_s=None,
                                          lag_p99_s=None, valid=False, why_invalid=s))
    job = type("Job", (), {"describe": lambda self: s})()
    out = text_of(load_text.render, summary, job)
    terminal_safe(out)


def test_markdown_code_spans_hold_only_what_they_can_show():
    assert code("max_num_seqs") == "`max_num_seqs`"
    assert code("a`b") == "a\\`b" and code("a|b") == "a\\|b"
    assert "<" not in code("<script>")


def test_markdown_escape_keeps_plain_text_readable():
    assert escape.markdown("ttft_p95 = 2.0 s > SLO (1.0 s) -> it's 1.5x") == "ttft_p95 = 2.0 s > SLO (1.0 s) -> it's 1.5x"
    assert escape.markdown("tpot <= 0.1") == "tpot <= 0.1"
    assert escape.markdown("_x_ *y* [z]") == "\\_x\\_ \\*y\\* \\[z\\]"
    assert escape.markdown("# h\n1. i\n---") == "\\# h\n1\\. i\n\\---"


def test_rule_page_escapes_override_values():
    # Override params are the user's text; the rest of the page is the advisor's own.
    rules = {r.id: r for r in load_rules()}
    rule = dataclasses.replace(rules["ADV001"], params={"x": "<script>[/x]\x1b[31m"})
    md = render_md("rule.md.j2", r=rule)
    assert "<script" not in md and "\x1b" not in md and "\\[/x\\]" in md
    assert "## What it detects" in md and "`max_num_seqs`" in md


# --- the real command line against the fake engine -----------------------------------------------

def _crafted_metrics(tmp_path: Path, name: str) -> list[str]:
    label = name.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    files = []
    for stem in ("metrics-queueing-t0", "metrics-queueing-t1"):
        f = tmp_path / f"{stem}.txt"
        f.write_text((FIXTURES / f"{stem}.txt").read_text().replace("tiny-llama", label))
        files += ["--metrics", str(f)]
    return files


CLI_HOSTILE = {k: HOSTILE[k] for k in ("closing tag", "sgr escape", "osc title", "html", "everything")}


@pytest.mark.parametrize("s", list(CLI_HOSTILE.values()), ids=list(CLI_HOSTILE))
def test_cli_reports_on_a_hostile_engine(tmp_path, s):
    version = json.dumps({"version": s})
    with fake_server(*_crafted_metrics(tmp_path, s), "--model-id", s, "--version-body", version) as url:
        runs = {
            "probe text": run_cli("probe", "--url", url, "--window", "1s", data_dir=tmp_path),
            "probe json": run_cli("probe", "--url", url, "--window", "1s", "-o", "json", data_dir=tmp_path),
            "diagnose markdown": run_cli("diagnose", "--url", url, "--window", "1s", "-o", "markdown",
                                         "--model", s, data_dir=tmp_path),
            "diagnose json": run_cli("diagnose", "--url", url, "--window", "1s", "-o", "json", data_dir=tmp_path),
        }
    for what, r in runs.items():
        where = f"{what}: exit {r.code}\n{r.stdout[-1500:]}\n{r.stderr[-1500:]}"
        assert r.code in (0, 1), where
        assert "Traceback" not in r.stdout + r.stderr, where
        assert "\x1b" not in r.stdout + r.stderr and "\x07" not in r.stdout + r.stderr, where
    assert escape.plain(s) in runs["probe text"].stdout.replace("\n", "")
    for what in ("probe json", "diagnose json"):
        data = strict_json(runs[what].stdout)
        assert data["engine"]["version"] == s and s in data["engine"]["models"]
    md = runs["diagnose markdown"].stdout
    assert "<script" not in md and "# Diagnosis of" in md


def test_cli_error_body_with_markup_is_one_line(tmp_path):
    # A target whose /metrics is not an exposition, with markup and controls in it.
    bad = tmp_path / "bad.txt"
    bad.write_text('vllm:num_requests_running{model_name="[/x]\x1b[31m} oops\n')
    with fake_server("--metrics", str(bad)) as url:
        r = run_cli("probe", "--url", url, "--window", "1s", data_dir=tmp_path)
    assert r.code == 2 and "Traceback" not in r.stderr, r.stderr
    assert "\x1b" not in r.stdout + r.stderr
    assert len(r.error_lines) == 1, r.stderr
