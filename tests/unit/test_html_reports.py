"""HTML reports: every state renders, untrusted text shows as text, charts are inline SVG, and
nothing is fetched from anywhere."""

from __future__ import annotations

import re

import pytest

from advisor.diagnosis.model import CheckSkip, ExperimentRef
from advisor.reports import documents, html, views
from advisor.store import open_store
from tests.unit.test_store import make_diagnosis
from tests.unit.test_store_experiments import KEY, make_result

EVIL = "<script>alert('x')</script>"


def offline(page: str) -> None:
    """Self-contained: no external script, style, font or image; nothing to load at all."""
    assert not re.search(r"<(script|img|link|iframe)[^>]+(src|href)=", page, re.I)
    assert "@import" not in page and "url(http" not in page
    assert not re.search(r"""(src|href)=["']?https?://""", page)


def evil_diagnosis():
    d = make_diagnosis()
    d.model = EVIL
    d.findings[0].evidence[0].text = f"label model={EVIL}"
    d.findings[0].checks[0].reason = EVIL
    return d


def with_experiment(d, result):
    d.findings[0].checks[0].verdict = ExperimentRef(experiment=result.id, verdict=result.verdict)
    d.findings[0].checks[1].verdict = CheckSkip(skipped=f"replicas: {EVIL}")
    return d


@pytest.mark.parametrize("state", ["healthy", "symptoms", "experiment", "aborted", "restore failed"])
def test_every_state_renders_escaped_and_offline(state):
    if state == "healthy":
        d = make_diagnosis(findings=0)
        d.model = EVIL
    else:
        d = evil_diagnosis()
    results = []
    if state in ("experiment", "aborted", "restore failed"):
        r = make_result()
        results.append(r)
        if state == "aborted":
            r.status, r.aborted = "aborted", f"guardrail {EVIL}"
            r.judgement = r.judgement.model_copy(update={"verdict": "inconclusive", "ratio": None, "ci": None})
        if state == "restore failed":
            r.baseline_restored, r.restore_note = False, f"port busy {EVIL}"
        d = with_experiment(d, r)
    page = documents.diagnosis_document(d, "html", results=results)
    offline(page)
    assert EVIL not in page and "&lt;script&gt;" in page
    if state == "healthy":
        assert "healthy: no rule fired" in page
        return
    assert 'id="checks"' in page and "histogram_quantile(0.5, ...)" in page, "the PromQL behind a number"
    if state != "symptoms":
        assert page.count("<svg") == 4, "evidence of both findings, forest plot, per-block chart"
        assert "forest plot" in page and "per-block" in page
    if state == "aborted":
        assert "<span class=\"dim\">aborted</span>" in page
    if state == "restore failed":
        assert "NOT restored" in page


def test_running_experiment_page_polls_and_shows_blocks(tmp_path):
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with open_store(url) as store:
        ident = store.start_experiment(KEY, "local", "http://h:1", "max_num_seqs", "8",
                                       {"lines": [f"design {EVIL}"]})
        page = html.render("experiment.html.j2", x=documents.stored_experiment_view(store, ident), dashboard=True)
        assert 'data-status="running"' in page and "fetch(" in page
        assert "no block has ended yet" in page and EVIL not in page
        store.finish_experiment(ident, make_result())
        page = html.render("experiment.html.j2", x=documents.stored_experiment_view(store, ident), dashboard=True)
        assert 'data-status="finished"' in page and "fetch(" not in page
        assert page.count("<svg") == 2
        offline(page.replace("fetch(location.pathname", ""))


def test_stored_diagnosis_carries_its_experiments_blocks(tmp_path):
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with open_store(url) as store:
        ident = store.start_experiment(KEY, "local", "http://h:1", "max_num_seqs", "8", {})
        store.finish_experiment(ident, make_result())
        diag = store.save_diagnosis(with_experiment(make_diagnosis(), make_result()), deployment="local")
        page = documents.stored_diagnosis(store, diag, "html")
        md = documents.stored_diagnosis(store, diag, "markdown")
    assert page.count('class="blocks"') == 1 and page.count("<tr><td>6</td>") == 1, "six blocks in run order"
    assert "improved" in md and "<svg" not in md


def test_report_file_format_by_extension(tmp_path):
    assert documents.format_of(tmp_path / "a.HTML") == "html"
    with pytest.raises(documents.ReportError, match="use a .html or .md"):
        documents.format_of(tmp_path / "a.pdf")


def test_view_json_has_no_charts():
    r = make_result()
    view = views.diagnosis_view(with_experiment(make_diagnosis(), r), experiments=views.experiment_views([r]))
    text = views.as_json(view)
    assert "<svg" not in text and '"verdict": "improved' in text.replace("improved on", "improved")


def test_weekly_report_renders_with_no_data_at_all(tmp_path):
    """A deployment whose Prometheus is down and whose store holds nothing: the report still
    renders, says why, and names what it could not read."""
    from advisor.fleet.config import FleetConfig
    from advisor.app.weekly import weekly_report

    cfg = FleetConfig.model_validate({"deployments": [{"name": f"x{EVIL[:0]}", "prom_url": "http://127.0.0.1:9"}]})
    with open_store(f"sqlite:///{tmp_path / 'a.db'}") as store:
        page = weekly_report(cfg, store, "html")
        md = weekly_report(cfg, store, "markdown")
    offline(page)
    assert "Prometheus at http://127.0.0.1:9" in page and "no data" in page
    assert "problem: Prometheus at" in md


def test_a_running_experiment_that_stopped_beating_is_stale(tmp_path):
    from datetime import datetime, timedelta

    from sqlalchemy import text as sql

    url = f"sqlite:///{tmp_path / 'a.db'}"
    with open_store(url) as store:
        ident = store.start_experiment(KEY, "local", "http://h:1", "max_num_seqs", "8", {})
        store.touch_experiment(ident)
        assert documents.stored_experiment_view(store, ident).status == "running"
        with store.engine.begin() as conn:
            conn.execute(sql("UPDATE experiments SET updated_at = :t"),
                         {"t": (datetime.utcnow() - timedelta(hours=1))})
        view = documents.stored_experiment_view(store, ident)
        page = html.render("experiment.html.j2", x=view, dashboard=True)
    assert view.status == "stale" and "advisor recover" in page and "fetch(" not in page


def result_with_server_readouts():
    from advisor.experiments.result import ServerReadout, ServerRow

    r = make_result()
    for b in r.blocks:
        b.server = ServerReadout(signals={"requests_running_avg": 2.0 if b.arm == "baseline" else 7.5},
                                 window_s=5.0, requests_counted=40 if b.arm == "baseline" else 32,
                                 outside_requests=8 if b.arm == "baseline" else 0)
    r.server = [ServerRow(signal="requests_running_avg", baseline=2.0, candidate=7.5, watched=True),
                ServerRow(signal=f"label {EVIL}", baseline=None, candidate=0.5, watched=False)]
    r.server_notes = [f"outside traffic: the baseline's engine finished 24 requests {EVIL}"]
    return r


def test_an_experiment_report_in_html_and_markdown_from_the_store(tmp_path, monkeypatch):
    """`advisor report experiment ID --out` writes either medium from one view: the verdict, the
    server readouts per arm with the watched signal marked, outside traffic per block, escaped."""
    from tests.support.cli import run_cli

    url = f"sqlite:///{tmp_path / 'a.db'}"
    with open_store(url) as store:
        ident = store.start_experiment(KEY, "local", "http://h:1", "max_num_seqs", "8", {"lines": [f"d {EVIL}"]})
        store.finish_experiment(ident, result_with_server_readouts())
    env = {"ADVISOR_DB_URL": url}
    for name in ("x.html", "x.md"):
        ran = run_cli("report", "experiment", str(ident), "--out", str(tmp_path / name), env=env, data_dir=tmp_path)
        assert ran.code == 0, ran.stderr
    page, md = (tmp_path / "x.html").read_text(), (tmp_path / "x.md").read_text()
    offline(page)
    assert EVIL not in page and EVIL not in md
    assert "Server readouts per arm" in page and "requests_running_avg &#9733;" in page and "x3.75" in page
    assert "<td>8</td>" in page, "outside requests per block"
    assert "# Experiment exp-20261201-133547: max_num_seqs -> 8" in md
    assert "| `requests_running_avg` \\* | 2 | 7.5 | x3.75 |" in md
    assert "> outside traffic: the baseline's engine finished 24 requests" in md
    assert "**improved** on ttft_p50" in md and "<svg" not in md
    ran = run_cli("report", "experiment", str(ident), "--out", str(tmp_path / "x.pdf"), env=env, data_dir=tmp_path)
    assert ran.code == 2 and "use a .html or .md" in ran.stderr


def test_weekly_report_and_deployment_page_name_an_aa_run_and_a_deployment_without_a_diagnosis(tmp_path):
    """An A/A experiment is listed as an A/A run (its value is None: it changes nothing), and a
    deployment never diagnosed is said to have no diagnosis, not one that found nothing."""
    from fastapi.testclient import TestClient

    from advisor.fleet.config import FleetConfig
    from advisor.app.weekly import weekly_report, weekly_view
    from advisor.web import create_app

    spec = tmp_path / "dep.yaml"
    spec.write_text("name: local\nengine: vllm\nmodel: tiny\nlauncher: endpoints\n"
                    "endpoints: {baseline: 'http://127.0.0.1:9', candidate: 'http://127.0.0.1:10'}\n")
    cfg = FleetConfig.model_validate({"deployments": [{"name": "local", "prom_url": "http://127.0.0.1:9",
                                                       "deployment": spec}]})
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with open_store(url) as store:
        ident = store.start_experiment("exp-aa", "local", "http://h:1", "aa", "None", {})
        store.finish_experiment(ident, make_result("exp-aa", "no change"))
        [w] = weekly_view(cfg, store).deployments
        md = weekly_report(cfg, store, "markdown")
        page = weekly_report(cfg, store, "html")
        assert w.next_change == "none known: this deployment has no diagnosis yet"
        assert [e.title for e in w.experiments] == ["A/A run (the baseline against itself)"]
        store.save_diagnosis(make_diagnosis(findings=0), deployment="local")
        [again] = weekly_view(cfg, store).deployments
    assert "found nothing to change" in again.next_change and "diagnosis 1" in again.next_change
    for text in (md, page):
        assert "A/A run (the baseline against itself)" in text and "aa -> None" not in text
        assert "-&gt; None" not in text and "&rarr; None" not in text
    assert "no diagnosis yet" in md and "found nothing to change" not in md
    app = create_app(cfg, store_url=url, token="t", host="127.0.0.1", log_dir=tmp_path / "logs")
    with TestClient(app, base_url="http://127.0.0.1") as c:
        listing = c.get("/deployments/local").text
    assert "A/A run (the baseline against itself)" in listing and "&rarr; None" not in listing
