"""The experiment runner end to end against fake engine processes (real processes on loopback):
block order, samples, journal, restore, verdicts, guardrails, dry run and bad input."""

import sys

import pytest
import yaml
from typer.testing import CliRunner

from advisor.cli import app
from advisor.experiments.design.deployment import Deployment
from advisor.experiments.design.plan import Design, Guardrails, block_order
from advisor.experiments.arms.journal import Journal
from advisor.experiments.arms.local import LocalLauncher
from advisor.engine_process import healthy
from advisor.children import stop_pid
from advisor.experiments.run.runner import execute
from advisor.workload.plan import plan
from advisor.workload.spec import Workload
from tests.support.servers import free_port, listener

FAKE = [sys.executable, "-m", "tests.support.fake_openai"]
pytestmark = pytest.mark.usefixtures("at_root")


def make(tmp_path, ports, base_args, cand_args, blocks=4, guard=None,
         output_tokens=16) -> tuple[Design, LocalLauncher, Journal]:
    port, cport = free_port(), free_port()
    ports += [port, cport]
    dep = Deployment.model_validate({"name": "fake", "engine": "vllm", "model": "fake", "launcher": "local",
                                     "local": {"command": FAKE, "args": base_args, "port": port,
                                               "candidate_port": cport, "arms": "parallel", "start_timeout_s": 20}})
    w = Workload.model_validate({"buckets": [{"prompt_tokens": 8, "output_tokens": output_tokens}], "requests": 24,
                                 "arrival": {"kind": "concurrency", "concurrency": 4}})
    d = Design(id="exp-test", deployment=dep, mechanism="max_num_seqs", value=8, baseline_args=base_args,
               candidate_args=cand_args, candidate_env={}, workload=w, requests=plan(w), blocks_per_arm=blocks,
               order=block_order(blocks), warmup_requests=4, primary=("tpot", "p50"),
               secondary=[("ttft", "p50"), ("e2e", "p95")], guardrails=guard or Guardrails())
    journal = Journal(tmp_path / "state")
    boot = LocalLauncher(dep, [], {}, journal, "boot", tmp_path / "logs")
    boot._start("baseline")
    journal.write("boot", "recovered")
    return d, LocalLauncher(dep, cand_args, {}, journal, d.id, tmp_path / "logs"), journal


def test_faster_candidate_is_improved_and_the_baseline_untouched(tmp_path, ports):
    d, lau, journal = make(tmp_path, ports, ["--delay", "0.006"], ["--delay", "0.002"])
    base_pid = listener(d.deployment.local.port)
    r = execute(d, lau, journal, lambda m: None)
    assert r.status == "finished" and r.verdict == "improved", [m.reason for m in r.metrics]
    assert r.ratio < 0.6 and r.ci[1] < 1
    assert [(b.arm, b.block) for b in r.blocks] == d.order
    assert all(b.requests == 24 and b.ok == 24 for b in r.blocks)
    assert r.baseline_restored and listener(d.deployment.local.port) == base_pid
    assert listener(d.deployment.local.candidate_port) is None
    events = [e["event"] for e in journal.entries("exp-test")]
    assert events[0] == "begin" and events[-1] == "restored" and events.count("block") == 8
    assert journal.pending() is None


# Identical arms: a per-token sleep long enough that a loaded machine's scheduling jitter (tests run
# four at a time on two cores) is a small part of it; at 3 ms an arm that happened to meet a busier
# moment looked 5 % slower in every block and a CI run called the A/A "improved".
AA_DELAY = ["--delay", "0.02"]


def test_identical_arms_never_claim_a_difference(tmp_path, ports):
    d, lau, journal = make(tmp_path, ports, AA_DELAY, [*AA_DELAY, "--same"], output_tokens=8)
    r = execute(d, lau, journal, lambda m: None)
    assert r.verdict in ("no change", "inconclusive")


def test_error_guardrail_aborts_keeps_blocks_and_restores(tmp_path, ports):
    d, lau, journal = make(tmp_path, ports, [], ["--fail-after", "10"], guard=Guardrails(max_error_rate=0.2))
    r = execute(d, lau, journal, lambda m: None)
    assert r.status == "aborted" and "failed on the candidate" in r.aborted
    assert r.verdict == "inconclusive"
    assert [b.arm for b in r.blocks] == ["baseline", "candidate"]
    assert r.baseline_restored and healthy(lau.url("baseline"))
    assert listener(d.deployment.local.candidate_port) is None


def test_request_cap_guardrail(tmp_path, ports):
    d, lau, journal = make(tmp_path, ports, [], ["--x"], guard=Guardrails(max_requests=60))
    r = execute(d, lau, journal, lambda m: None)
    assert r.status == "aborted" and "60 requests" in r.aborted and len(r.blocks) == 2


runner = CliRunner()


def dep_file(tmp_path, **local) -> str:
    spec = {"name": "d", "engine": "vllm", "model": "m", "launcher": "local",
            "local": {"command": FAKE, "args": ["--max-num-seqs", "2"], "port": free_port(), **local}}
    p = tmp_path / "dep.yaml"
    p.write_text(yaml.safe_dump(spec))
    return str(p)


def test_dry_run_prints_both_argv_and_touches_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("ADVISOR_DATA_DIR", str(tmp_path / "data"))
    from advisor.settings import get_settings
    get_settings.cache_clear()
    r = runner.invoke(app, ["experiment", "--deployment", dep_file(tmp_path), "--mechanism", "max_num_seqs",
                            "--value", "8", "--dry-run"])
    get_settings.cache_clear()
    assert r.exit_code == 0, r.output
    assert "--max-num-seqs 2" in r.output and "--max-num-seqs 8" in r.output and "Dry run" in r.output
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("args, shown", [
    (["--mechanism", "max_num_seqs", "--value", "32"], "concurrency 32"),
    (["--mechanism", "max_num_seqs", "--value", "4"], "concurrency 8"),
    (["--mechanism", "max_num_seqs", "--value", "32", "--concurrency", "12"], "concurrency 12"),
    (["--mechanism", "prefix_caching", "--value", "true"], "concurrency 8"),
])
def test_default_concurrency_lets_only_the_baseline_queue_for_slot_limits(tmp_path, args, shown):
    r = runner.invoke(app, ["experiment", "--deployment", dep_file(tmp_path), *args, "--dry-run"])
    assert r.exit_code == 0 and f"closed loop, {shown}," in r.output, r.output


@pytest.mark.parametrize("args, message", [
    (["--mechanism", "warp_drive"], "unknown mechanism 'warp_drive'"),
    (["--mechanism", "max_num_seqs", "--value", "2"], "max_num_seqs is already 2 in the baseline's argv: nothing to test"),
    (["--mechanism", "max_num_seqs", "--value", "abc"], "max_num_seqs"),
    (["--mechanism", "max_num_seqs", "--value", "8", "--blocks", "1"], "greater than or equal to 2"),
    (["--mechanism", "quantization"], "model file or folder as --value"),
    (["--mechanism", "quantization", "--value", "/nowhere/model-Q4_K_M.gguf"], "no such model file or folder"),
])
def test_bad_experiments_are_refused_before_anything_starts(tmp_path, args, message):
    r = runner.invoke(app, ["experiment", "--deployment", dep_file(tmp_path), *args])
    assert r.exit_code == 2 and message in r.output, r.output


def test_a_model_swap_to_a_file_that_is_not_a_model_is_refused_before_anything_starts(tmp_path):
    notes = tmp_path / "notes.gguf"
    notes.write_bytes(b"not a model at all, just text" * 4)
    r = runner.invoke(app, ["experiment", "--deployment", dep_file(tmp_path), "--mechanism", "quantization",
                            "--value", str(notes)])
    assert r.exit_code == 2 and "candidate model:" in r.output and "magic" in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1


def test_prompts_that_cannot_be_sized_stop_the_baseline_it_started(tmp_path, monkeypatch):
    # The baseline was not serving; the advisor starts it to size prompts, and must not leave it running.
    monkeypatch.setenv("ADVISOR_DATA_DIR", str(tmp_path / "data"))
    from advisor.settings import get_settings
    get_settings.cache_clear()
    dep = dep_file(tmp_path, args=["--max-num-seqs", "2", "--no-tokenize"], start_timeout_s=20)
    port = yaml.safe_load(open(dep))["local"]["port"]
    try:
        r = runner.invoke(app, ["experiment", "--deployment", dep, "--mechanism", "max_num_seqs", "--value", "8"])
        assert r.exit_code == 2 and "tokenizer" in r.output, r.output
        assert listener(port) is None, "the baseline it started is stopped again"
    finally:
        get_settings.cache_clear()
        if listener(port):
            stop_pid(listener(port))


def test_bad_deployment_file_names_the_field(tmp_path):
    p = tmp_path / "dep.yaml"
    p.write_text(yaml.safe_dump({"name": "d", "engine": "vllm", "model": "m", "launcher": "local",
                                 "local": {"command": FAKE, "port": 99999}}))
    r = runner.invoke(app, ["experiment", "--deployment", str(p), "--mechanism", "max_num_seqs"])
    assert r.exit_code == 2 and "field local.port" in r.output
