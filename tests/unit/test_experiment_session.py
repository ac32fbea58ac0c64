"""The experiment use case below the command line: no typer under advisor/cli's siblings, errors as
AdvisorError (one line at the command), guardrails from the command line over the deployment spec,
and the diagnosis's checks given typed verdicts or typed skips."""

import json
import re
from pathlib import Path

import yaml

from advisor.experiments.design.deployment import Deployment
from advisor.experiments.run.setup import effective_guardrails
from tests.support.cli import assert_one_line_error, run_cli

ROOT = Path(__file__).resolve().parents[2]


def test_no_typer_below_the_command_line():
    for p in (ROOT / "advisor").rglob("*.py"):
        if "cli" in p.relative_to(ROOT / "advisor").parts[:1]:
            continue
        assert not re.search(r"^\s*(import typer|from typer|import advisor\.cli|from advisor\.cli)", p.read_text(), re.M), p


def _dep(tmp_path, **extra) -> Path:
    spec = {"name": "d", "engine": "vllm", "model": "m", "launcher": "local",
            "local": {"command": ["engine"], "args": ["--max-num-seqs", "2"], "port": 18999}, **extra}
    p = tmp_path / "dep.yaml"
    p.write_text(yaml.safe_dump(spec))
    return p


def test_guardrails_come_from_the_command_line_over_the_deployment_over_the_defaults():
    dep = Deployment.model_validate({"name": "d", "engine": "vllm", "model": "m", "launcher": "local",
                                     "local": {"command": ["e"], "port": 1},
                                     "guardrails": {"max_duration": "10m", "max_error_rate": 0.1}})
    g = effective_guardrails(dep)
    assert (g.max_duration_s, g.max_requests, g.max_error_rate) == (600.0, 5000, 0.1)
    g = effective_guardrails(dep, max_duration_s=30.0, max_requests=7)
    assert (g.max_duration_s, g.max_requests, g.max_error_rate) == (30.0, 7, 0.1)


def test_guardrails_in_the_dry_run(tmp_path):
    dep = _dep(tmp_path, guardrails={"max_duration": "5m", "max_requests": 300})
    r = run_cli("experiment", "--deployment", str(dep), "--mechanism", "max_num_seqs", "--value", "8",
                "--dry-run", "--max-error-rate", "0.05", data_dir=tmp_path / "data")
    assert r.code == 0, r.stderr
    assert "guardrails: at most 300s and 300 requests; abort above 5% errors" in r.stdout
    r = run_cli("experiment", "--deployment", str(dep), "--mechanism", "max_num_seqs", "--value", "8",
                "--dry-run", "--max-duration", "30m", "--max-requests", "64", "-o", "json", data_dir=tmp_path / "data")
    plan = json.loads(r.stdout)["plan"]
    assert any("at most 1800s and 64 requests" in line for line in plan), plan
    assert not (tmp_path / "data").exists()


def test_bad_guardrails_are_one_line_before_anything_starts(tmp_path):
    dep = _dep(tmp_path)
    base = ("experiment", "--deployment", str(dep), "--mechanism", "max_num_seqs", "--value", "8")
    assert_one_line_error(run_cli(*base, "--max-duration", "soon", data_dir=tmp_path / "data"),
                          contains="--max-duration: not a duration")
    assert_one_line_error(run_cli(*base, "--max-error-rate", "1.5", data_dir=tmp_path / "data"),
                          contains="--max-error-rate")
    bad = _dep(tmp_path, guardrails={"max_requests": 0})
    assert_one_line_error(run_cli("experiment", "--deployment", str(bad), "--mechanism", "max_num_seqs",
                                  data_dir=tmp_path / "data"), contains="guardrails.max_requests")
    assert not (tmp_path / "data").exists()


def test_checks_get_typed_skips_with_their_reason(tmp_path):
    from advisor.diagnosis.model import CheckSkip
    from advisor.experiments.run.checks import verify_top_checks
    from advisor.experiments.design.deployment import load_deployment
    from tests.unit.test_reports import diagnosis

    d = diagnosis()
    for c in d.checks:
        c.held_back = True
    said = []
    verify_top_checks(d, load_deployment(_dep(tmp_path)), 3, said.append)
    assert d.checks and all(isinstance(c.verdict, CheckSkip) and c.verdict.skipped == "held back" for c in d.checks)
    assert not said


def _prefix_check_first(d):
    d.checks.sort(key=lambda c: c.mechanism != "prefix_caching")
    for c in d.checks:
        c.held_back, c.already = False, None
    d.checks[0].direction = "on"
    return d


def test_a_replay_that_cannot_show_shared_prefixes_does_not_test_prefix_caching(tmp_path, monkeypatch):
    """Prefix caching off: the engine counts no prefix hits, so the replay from Prometheus has no shared
    prefixes; testing it on that replay would only measure the cost of turning it on. A declared
    workload (diagnose --workload) is run instead."""
    from advisor.diagnosis.model import CheckSkip
    from advisor.errors import AdvisorError
    from advisor.experiments.run import checks
    from advisor.experiments.design.deployment import load_deployment
    from advisor.workload.spec import Workload
    from tests.unit.test_reports import diagnosis

    d = _prefix_check_first(diagnosis())
    d.checks[0].mechanism = "prefix_caching"
    spec = {"name": "w", "requests": 8, "arrival": {"kind": "concurrency", "concurrency": 4},
            "buckets": [{"prompt_tokens": 100, "output_tokens": 8}]}
    plain = Workload.model_validate(spec)
    shared = Workload.model_validate({**spec, "prefix": {"groups": 1, "tokens": 50, "share": 1.0}})
    monkeypatch.setattr(checks, "_replay_workload", lambda diag, say: plain)
    designed = []

    def fake_design(dep, mechanism, value, workload, **kw):
        designed.append((mechanism, workload.prefix))
        raise AdvisorError("stop here")

    monkeypatch.setattr(checks, "design", fake_design)  # where verify_top_checks looks it up
    dep = load_deployment(_dep(tmp_path))
    checks.verify_top_checks(d, dep, 1, lambda m: None)
    skip = d.checks[0].verdict
    assert isinstance(skip, CheckSkip) and "no shared prefixes" in skip.skipped and "--workload" in skip.skipped
    assert ("prefix_caching", None) not in designed

    d = _prefix_check_first(diagnosis())
    d.checks[0].mechanism = "prefix_caching"
    designed.clear()
    checks.verify_top_checks(d, dep, 1, lambda m: None, workload=shared)
    assert designed[0] == ("prefix_caching", shared.prefix), "the declared workload, shared prefixes and all"


def _replayed():
    """A small workload for diagnose --experiment's loop, declared so that nothing reads Prometheus."""
    from advisor.workload.spec import Workload

    return Workload.model_validate({"name": "w", "requests": 8, "arrival": {"kind": "concurrency", "concurrency": 4},
                                    "buckets": [{"prompt_tokens": 100, "output_tokens": 8}]})


def test_diagnose_blocks_cap_every_experiment_it_designs(tmp_path, monkeypatch):
    """`advisor diagnose --experiment N --blocks B`: each check's design gets B as its most blocks
    per arm; without it the planner decides (None)."""
    from advisor.errors import AdvisorError
    from advisor.experiments.design.deployment import load_deployment
    from advisor.experiments.run import checks
    from tests.unit.test_reports import diagnosis

    w = _replayed()
    got = []

    def fake_design(dep, mechanism, value, workload, **kw):
        got.append(kw["blocks"])
        raise AdvisorError("stop here")

    monkeypatch.setattr(checks, "design", fake_design)
    dep = load_deployment(_dep(tmp_path))
    checks.verify_top_checks(diagnosis(), dep, 1, lambda m: None, workload=w, blocks=4)
    capped = len(got)
    checks.verify_top_checks(diagnosis(), dep, 1, lambda m: None, workload=w)
    assert capped and set(got[:capped]) == {4} and set(got[capped:]) == {None}, got


def test_a_check_whose_experiment_cannot_start_says_why_and_an_interrupt_keeps_what_ran(tmp_path, monkeypatch):
    """diagnose --experiment N: an experiment that cannot start leaves its check with the reason and
    the next check is tried; an interrupt (its baseline restored) keeps that experiment's result on
    its check and runs no further experiments."""
    from types import SimpleNamespace

    from advisor.diagnosis.model import CheckSkip, ExperimentRef
    from advisor.errors import AdvisorError
    from advisor.experiments.design.deployment import load_deployment
    from advisor.experiments.run import checks, session
    from tests.unit.test_reports import diagnosis

    w = _replayed()
    runs = []

    def fake_run(d, **kw):
        runs.append(d)
        if len(runs) == 1:
            raise AdvisorError("port 1 is taken")
        raise session.KeyboardInterruptWithResult(SimpleNamespace(id="exp-7", verdict="improved"))

    monkeypatch.setattr(checks, "design", lambda dep, mechanism, *a, **kw: mechanism)
    monkeypatch.setattr(checks.session, "run", fake_run)
    d = diagnosis()
    said = []
    got = checks.verify_top_checks(d, load_deployment(_dep(tmp_path)), 5, said.append, workload=w)
    tried = [c for c in d.checks if c.mechanism in runs]
    assert len(runs) == 2 and len(tried) >= 2, (runs, [c.mechanism for c in d.checks])
    first, second = tried[0], tried[1]
    assert isinstance(first.verdict, CheckSkip)
    assert first.verdict.skipped == "the experiment could not start: port 1 is taken"
    assert isinstance(second.verdict, ExperimentRef) and second.verdict.experiment == "exp-7"
    assert [r.id for r in got] == ["exp-7"] and said[-1] == "interrupted: no further experiments"


def test_diagnose_blocks_need_an_experiment_and_a_sane_count(tmp_path):
    assert_one_line_error(run_cli("diagnose", "--url", "http://127.0.0.1:9", "--blocks", "4",
                                  data_dir=tmp_path / "data"), contains="--blocks")
    assert_one_line_error(run_cli("diagnose", "--url", "http://127.0.0.1:9", "--deployment", str(_dep(tmp_path)),
                                  "--experiment", "1", "--blocks", "1", data_dir=tmp_path / "data"),
                          contains="--blocks must be between 2")


def test_diagnose_workload_needs_an_experiment_and_a_valid_file(tmp_path):
    bad = tmp_path / "w.yaml"
    bad.write_text("name: w\nrequests: 0\narrival: {kind: concurrency, concurrency: 2}\nbuckets: [{prompt_tokens: 10, output_tokens: 2}]\n")
    assert_one_line_error(run_cli("diagnose", "--url", "http://127.0.0.1:9", "--workload", str(bad),
                                  data_dir=tmp_path / "data"), contains="--workload")
    assert_one_line_error(run_cli("diagnose", "--url", "http://127.0.0.1:9", "--deployment", str(_dep(tmp_path)),
                                  "--experiment", "1", "--workload", str(bad), data_dir=tmp_path / "data"),
                          contains="requests")
