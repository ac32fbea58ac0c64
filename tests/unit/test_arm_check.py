"""The endpoints launcher's arms: refused when they differ in more than the named knob, or when the
knob the engines reveal does not differ; an A/A run needs identical arms. The engines are fake
processes on loopback serving real vLLM /metrics captures, edited where an arm differs."""

from __future__ import annotations

import pytest
import yaml

from advisor.experiments.arms import arm_check
from advisor.experiments.design.deployment import Deployment
from advisor.experiments.arms.engine_state import EngineState, observe_url
from advisor.experiments.arms.endpoints import EndpointsLauncher
from advisor.experiments.arms.protocol import LaunchError
from tests.support.servers import fake_server
from tests.unit.test_snapshot_honesty import text

pytestmark = pytest.mark.usefixtures("at_root")


def metrics_file(tmp_path, name: str, **changes: str):
    body = text("metrics-queueing-t1")
    for key, value in changes.items():
        old = next(part for part in body.split(",") if part.startswith(f"{key}="))
        body = body.replace(old, f'{key}="{value}"', 1)
    path = tmp_path / f"{name}.txt"
    path.write_text(body)
    return str(path)


def state(config: dict, version="0.32.0", models=("tiny-llama",)) -> EngineState:
    return EngineState(version=version, config=config, models=models, max_model_len=4096)


def test_only_the_knobs_key_differs():
    other, own, _ = arm_check.differences(state({"enable_prefix_caching": "False", "block_size": "128"}),
                                       state({"enable_prefix_caching": "True", "block_size": "128"}),
                                       "prefix_caching")
    assert other == [] and own == "enable_prefix_caching False vs True"


def test_derived_sizes_are_not_differences_but_everything_else_is():
    other, _, unconfirmed = arm_check.differences(
        state({"num_gpu_blocks": "8192", "block_size": "16", "kv_offloading_backend": "native"}, version="0.31"),
        state({"num_gpu_blocks": "8000", "block_size": "128"}), "max_num_seqs")
    assert other == ["version 0.31 vs 0.32.0", "block_size 16 vs 128"]
    assert unconfirmed == ["kv_offloading_backend"], "revealed by one arm only: not a difference"


def test_a_version_one_arm_does_not_reveal_is_a_note_not_a_refusal():
    note = arm_check.check(state({"enable_prefix_caching": "False"}, version=None),
                           state({"enable_prefix_caching": "True"}), "prefix_caching")
    assert note == "version revealed by one arm only, so not compared"


def test_a_model_swap_is_the_quantization_knob_and_a_difference_for_any_other():
    base, cand = state({}, models=("m-bf16",)), state({}, models=("m-fp8",))
    assert arm_check.differences(base, cand, "quantization")[:2] == ([], "models m-bf16 vs m-fp8")
    with pytest.raises(LaunchError, match="differ in more than max_num_seqs: models m-bf16 vs m-fp8"):
        arm_check.check(base, cand, "max_num_seqs")
    assert arm_check.changed_mechanisms(base, cand) == {"quantization"}


def test_unrevealed_knob_goes_ahead_on_trust_and_says_so():
    note = arm_check.check(state({"block_size": "128"}), state({"block_size": "128"}), "max_num_seqs")
    assert note.startswith("the engines do not reveal max_num_seqs")


def test_an_arm_that_reveals_nothing_is_a_note():
    note = arm_check.check(state({}), EngineState(problem="connection refused"), "prefix_caching")
    assert "the candidate revealed nothing (connection refused)" in note


def dep(base: str, cand: str) -> Deployment:
    return Deployment.model_validate(yaml.safe_load(f"""
name: ep
engine: vllm
model: tiny-llama
launcher: endpoints
endpoints: {{baseline: "{base}", candidate: "{cand}"}}
"""))


def test_endpoints_differing_in_two_knobs_are_refused_before_anything_is_sent(tmp_path):
    base = metrics_file(tmp_path, "base")
    cand = metrics_file(tmp_path, "cand", enable_prefix_caching="True", block_size="16")
    with fake_server("--metrics", base, "--model-id", "tiny-llama") as b, \
            fake_server("--metrics", cand, "--model-id", "tiny-llama") as c:
        assert observe_url(c, "vllm", "tiny-llama").config["block_size"] == "16"
        with pytest.raises(LaunchError) as e:
            EndpointsLauncher(dep(b, c), "prefix_caching").preflight()
    assert "differ in more than prefix_caching: block_size 128 vs 16" in str(e.value)
    assert "(and enable_prefix_caching False vs True)" in str(e.value)


def test_identical_endpoints_are_refused_for_a_revealed_knob_and_accepted_for_an_a_a(tmp_path):
    same = metrics_file(tmp_path, "same")
    with fake_server("--metrics", same, "--model-id", "tiny-llama") as b, \
            fake_server("--metrics", same, "--model-id", "tiny-llama") as c:
        with pytest.raises(LaunchError, match="both endpoints run enable_prefix_caching=False: the candidate does "
                                              "not change prefix_caching"):
            EndpointsLauncher(dep(b, c), "prefix_caching").preflight()
        aa = EndpointsLauncher(dep(b, c), aa=True)
        aa.preflight()
        assert aa.notes == []


def test_an_a_a_on_unlike_endpoints_is_refused(tmp_path):
    with fake_server("--metrics", metrics_file(tmp_path, "a"), "--model-id", "tiny-llama") as b, \
            fake_server("--metrics", metrics_file(tmp_path, "b", cache_dtype="fp8"), "--model-id", "tiny-llama") as c:
        with pytest.raises(LaunchError, match="A/A run needs two identical arms; the endpoints differ in cache_dtype "
                                              "auto vs fp8"):
            EndpointsLauncher(dep(b, c), aa=True).preflight()


def test_the_knob_alone_differing_goes_ahead(tmp_path):
    with fake_server("--metrics", metrics_file(tmp_path, "a"), "--model-id", "tiny-llama") as b, \
            fake_server("--metrics", metrics_file(tmp_path, "b", enable_prefix_caching="True"),
                        "--model-id", "tiny-llama") as c:
        launcher = EndpointsLauncher(dep(b, c), "prefix_caching")
        launcher.preflight()
        assert launcher.notes == []


def test_diagnose_with_endpoints_runs_only_the_check_the_candidate_changes(tmp_path):
    from advisor.experiments.run.checks import _endpoint_changes

    said = []
    with fake_server("--metrics", metrics_file(tmp_path, "a"), "--model-id", "tiny-llama") as b, \
            fake_server("--metrics", metrics_file(tmp_path, "b", enable_prefix_caching="True"),
                        "--model-id", "tiny-llama") as c:
        assert _endpoint_changes(dep(b, c), said.append) == {"prefix_caching"}
        assert _endpoint_changes(dep(b, b), said.append) is None, "nothing revealed differs: cannot tell"
    assert said == ["the endpoints' candidate changes prefix_caching: only that check is run"]
