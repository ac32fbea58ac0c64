"""The runner's looks and warmups against fake engine processes (real processes on loopback), and
the --aa / --plan commands: unit tests of our own orchestration; the real engine's are in tests/e2e."""

import dataclasses
import json

import pytest
import yaml
from typer.testing import CliRunner

from advisor.cli import app
from advisor.experiments.design import planning
from advisor.experiments.design.deployment import Deployment
from advisor.experiments.design.plan import Design, block_order
from advisor.experiments.arms.journal import Journal
from advisor.experiments.arms.local import LocalLauncher
from advisor.experiments.run.runner import execute
from advisor.workload.plan import plan
from advisor.workload.spec import Workload
from tests.support.servers import free_port, listener
from tests.unit.test_experiment_runner import AA_DELAY, FAKE, make

pytestmark = pytest.mark.usefixtures("at_root")
runner = CliRunner()

@pytest.fixture
def data_dir(isolated_store):
    return isolated_store / "data"


def test_a_large_effect_stops_at_the_first_decisive_look(tmp_path, ports):
    d, lau, journal = make(tmp_path, ports, ["--delay", "0.006"], ["--delay", "0.002"], blocks=10)
    d.stopping = planning.stopping("p50", 10)
    r = execute(d, lau, journal, lambda m: None)
    first = d.stopping.first_look
    assert r.verdict == "improved" and r.stop_reason.startswith("decisive at look 1"), r.stop_reason
    assert [look.blocks for look in r.looks] == [first] and r.looks[0].alpha == d.stopping.levels[0]
    assert len(r.blocks) == 2 * first < 2 * d.blocks_per_arm
    assert r.metrics[0].level == pytest.approx(1 - d.stopping.levels[0]), "the verdict is read at the look's level"
    assert r.looks[0].requests == sum(b.requests for b in r.blocks)
    assert [e["event"] for e in journal.entries(d.id)].count("block") == 2 * first
    assert r.baseline_restored


def test_identical_arms_run_to_the_maximum_without_a_difference(tmp_path, ports):
    d, lau, journal = make(tmp_path, ports, AA_DELAY, [*AA_DELAY, "--same"], blocks=6, output_tokens=8)
    d.stopping = planning.stopping("p50", 6)
    r = execute(d, lau, journal, lambda m: None)
    assert r.verdict in ("no change", "inconclusive")
    assert all(m.verdict in ("no change", "inconclusive") for m in r.metrics)
    if r.verdict == "inconclusive":
        assert len(r.blocks) == 12 and "planned maximum of 6 blocks per arm" in r.stop_reason


def test_fixed_horizon_takes_one_look_at_the_end(tmp_path, ports):
    d, lau, journal = make(tmp_path, ports, ["--delay", "0.006"], ["--delay", "0.002"], blocks=4)
    r = execute(d, lau, journal, lambda m: None)
    assert [look.blocks for look in r.looks] == [4] and "fixed horizon" in r.stop_reason
    assert r.metrics[0].level == pytest.approx(0.95)


def test_every_restart_is_warmed_up_and_timed(tmp_path, ports):
    port = free_port()
    ports.append(port)
    dep = Deployment.model_validate({"name": "seq", "engine": "vllm", "model": "fake", "launcher": "local",
                                     "local": {"command": FAKE, "args": ["--delay", "0.002"], "port": port,
                                               "arms": "sequential", "owns_process": True, "start_timeout_s": 20}})
    w = Workload.model_validate({"buckets": [{"prompt_tokens": 8, "output_tokens": 8}], "requests": 12,
                                 "arrival": {"kind": "concurrency", "concurrency": 4}})
    journal = Journal(tmp_path / "state")
    boot = LocalLauncher(dep, [], {}, journal, "boot", tmp_path / "logs")
    boot._start("baseline")
    journal.write("boot", "recovered")
    d = Design(id="exp-seq", deployment=dep, mechanism="max_num_seqs", value=8, baseline_args=["--delay", "0.002"],
               candidate_args=["--delay", "0.002", "--x"], candidate_env={}, workload=w, requests=plan(w),
               blocks_per_arm=2, order=block_order(2), warmup_requests=5, primary=("tpot", "p50"), secondary=[])
    lau = LocalLauncher(dep, d.candidate_args, {}, journal, d.id, tmp_path / "logs")
    r = execute(d, lau, journal, lambda m: None)
    # A1 (found serving: warmed once), B1 (started), B2 (serving), A2 (restarted)
    assert [(b.arm, b.block) for b in r.blocks] == [("baseline", 0), ("candidate", 0), ("candidate", 1),
                                                    ("baseline", 1)]
    assert [b.warmup_requests for b in r.blocks] == [5, 5, 0, 5]
    assert [b.restart_s is not None for b in r.blocks] == [False, True, False, True]
    assert all(b.restart_s > 0 for b in r.blocks if b.restart_s is not None)
    assert r.baseline_restored


# --------------------------------------------------------------------------------------------
# --aa and --plan at the command line


def _dep(tmp_path, args=("--delay", "0.003")) -> tuple[str, int, int]:
    port, cport = free_port(), free_port()
    spec = {"name": "d", "engine": "vllm", "model": "fake", "launcher": "local",
            "local": {"command": FAKE, "args": list(args), "port": port, "candidate_port": cport,
                      "arms": "parallel", "start_timeout_s": 60}}
    p = tmp_path / "dep.yaml"
    p.write_text(yaml.safe_dump(spec))
    return str(p), port, cport


def test_plan_without_a_calibration_states_its_default(tmp_path, data_dir):
    dep, _, _ = _dep(tmp_path)
    r = runner.invoke(app, ["experiment", "--deployment", dep, "--plan", "--output", "json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    p95 = next(x for x in rows if (x["metric"], x["statistic"]) == ("ttft", "p95"))
    assert p95["power"] >= 0.8 and p95["requests_per_block"] * p95["first_look"] * 0.05 >= 10
    assert all("conservative default" in x["noise_source"] for x in rows if not x["problem"])
    text = runner.invoke(app, ["experiment", "--deployment", dep, "--plan", "--effect", "0.5"])
    assert text.exit_code == 0 and "50% effect" in text.output and "max blocks/arm" in text.output


def test_plan_for_a_mechanism_prints_its_design_and_touches_nothing(tmp_path, data_dir):
    dep, port, _ = _dep(tmp_path)
    r = runner.invoke(app, ["experiment", "--deployment", dep, "--mechanism", "max_num_seqs", "--value", "8",
                            "--plan", "--readout", "ttft_p99", "--output", "json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["requests_per_block"] * out["first_look"] * 0.01 >= 10 and out["sequential"]
    assert any("planned for a 30% effect" in line for line in out["plan"])
    assert listener(port) is None and not data_dir.exists()
    fixed = runner.invoke(app, ["experiment", "--deployment", dep, "--mechanism", "max_num_seqs", "--value", "8",
                                "--readout", "ttft_p99", "--block-requests", "48", "--plan"])
    assert fixed.exit_code == 2 and "at least 334 requests per block" in fixed.output, fixed.output


@pytest.mark.parametrize("args, message", [
    (["--aa", "--mechanism", "max_num_seqs"], "give no --mechanism or --value"),
    ([], "give --mechanism"),
])
def test_aa_and_plan_usage_errors(tmp_path, data_dir, args, message):
    dep, _, _ = _dep(tmp_path)
    r = runner.invoke(app, ["experiment", "--deployment", dep, *args])
    assert r.exit_code == 2 and message in r.output, r.output


def test_aa_run_measures_and_stores_the_noise_that_later_plans_use(tmp_path, data_dir, ports):
    dep, port, cport = _dep(tmp_path, AA_DELAY)
    ports += [port, cport]
    r = runner.invoke(app, ["experiment", "--deployment", dep, "--aa", "--blocks", "6", "--block-requests", "16",
                            "--fixed", "--output", "json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["mechanism"] == "aa", out
    # Not a significance test: two fake arms are so quiet that a 2 % difference in how a loaded host
    # schedules their processes separates all 6 blocks (p 0.002, seen here while a compiler ran). A
    # runner that fed the arms different traffic would move the medians far more than that.
    medians = [m for m in out["metrics"] if m["statistic"] == "p50"]
    assert medians and all(0.67 <= m["ratio"] <= 1.5 for m in medians), \
        [(m["metric"], m["statistic"], m["ratio"], m["adjusted_p"]) for m in out["metrics"]]
    assert out["manifest"]["candidate_argv"] == out["manifest"]["baseline_argv"]
    names = {(c["metric"], c["statistic"]) for c in out["calibration"]}
    assert {("ttft", "p50"), ("tpot", "p50"), ("output_tokens", "per_s")} <= names
    assert listener(cport) is None, "the A/A candidate is stopped"
    plans = runner.invoke(app, ["experiment", "--deployment", dep, "--plan", "--output", "json"])
    rows = {(x["metric"], x["statistic"]): x for x in json.loads(plans.stdout)}
    assert rows[("ttft", "p50")]["noise_source"].startswith(f"A/A calibration {out['id']}")
    text = runner.invoke(app, ["experiment", "--deployment", dep, "--mechanism", "max_num_seqs", "--value", "8",
                               "--dry-run"])
    assert text.exit_code == 0 and f"A/A calibration {out['id']}" in text.output, text.output


def test_design_dataclass_defaults_keep_the_fixed_horizon():
    fields = {f.name: f for f in dataclasses.fields(Design)}
    assert fields["stopping"].default_factory().sequential is False


def test_a_baseline_whose_blocks_are_all_invalid_is_stopped_as_out_of_reach_long_before_the_maximum(tmp_path, ports,
                                                                                                     monkeypatch):
    """The runner asks the out-of-reach rule after every pair of blocks: a load generator behind its
    schedule on every baseline block (the lag forced invalid here, the engines real fake processes)
    ends the run with "cannot be judged", the arm, the cause and the remedy, after a few blocks of
    the 12 planned; the baseline is restored."""
    from advisor.experiments.run import runner as runner_mod

    real = runner_mod.summarize
    calls = {"n": 0}

    def summarize(r):
        s = real(r)
        calls["n"] += 1
        arm = d.order[calls["n"] - 1][0]
        if arm == "baseline":
            s.generator = s.generator.model_copy(update={"valid": False, "why_invalid": "scheduling lag p99 300 ms > 50 ms"})
        return s

    d, lau, journal = make(tmp_path, ports, ["--delay", "0.006"], ["--delay", "0.002"], blocks=12)
    d.stopping = planning.stopping("p50", 12)
    monkeypatch.setattr(runner_mod, "summarize", summarize)
    r = execute(d, lau, journal, lambda m: None)
    assert r.stop_reason and r.stop_reason.startswith("stopped after") and "cannot be judged" in r.stop_reason, \
        r.stop_reason
    per_arm = len(r.blocks) // 2
    assert per_arm < 12 and "baseline" in r.stop_reason and "scheduling lag p99 300 ms" in r.stop_reason
    assert "Remedy:" in r.stop_reason
    assert r.verdict == "inconclusive" and all(not b.generator_valid for b in r.blocks if b.arm == "baseline")
    assert r.baseline_restored
