"""A workload whose requests pass the target's context window is refused before anything is sent:
the engine would answer each with HTTP 400, and an experiment end in its error guardrail (or a
load run report the workload's fault as the deployment's error rate). The refusal names the
bucket, the sizes and where the limit was read; a target that states no limit refuses nothing."""

from __future__ import annotations

import pytest
import yaml

from advisor.experiments.arms.engine_state import EngineState
from advisor.workload.context import check_fits
from advisor.workload.plan import PlannedRequest
from advisor.workload.spec import Workload, WorkloadError
from advisor.experiments.run.setup import design
from tests.support.cli import assert_one_line_error, run_cli
from tests.support.servers import fake_server
from tests.unit.test_candidates import dep


def req(i: int, prompt: int, output: int, bucket: str = "b") -> PlannedRequest:
    return PlannedRequest(index=i, at_s=None, bucket=bucket, prompt_tokens=prompt, output_tokens=output,
                          prefix_group=None, cancel_after_tokens=None)


def test_a_request_past_the_context_is_named_with_its_bucket_and_sizes():
    plan = [req(0, 100, 10), req(1, 4000, 200, "long"), req(2, 3000, 1300, "long")]
    with pytest.raises(WorkloadError) as e:
        check_fits(plan, 4096, "max_model_len of http://h/v1/models")
    msg = str(e.value)
    assert "2 of 3 planned requests" in msg and "context of 4,096" in msg and "http://h/v1/models" in msg
    assert "bucket 'long'" in msg and "3,000-token prompt with a 1,300-token answer" in msg, msg


def test_requests_that_fit_exactly_or_an_unknown_context_pass():
    check_fits([req(0, 4000, 96)], 4096, "x")  # prompt + answer == the context: served
    check_fits([req(0, 10**6, 10**6)], None, "x")


def test_an_experiment_design_refuses_a_workload_past_the_baselines_max_model_len():
    w = Workload.model_validate({"name": "long", "requests": 8, "arrival": {"kind": "concurrency", "concurrency": 2},
                                 "buckets": [{"name": "huge", "prompt_tokens": [3000, 3500], "output_tokens": [64, 64]}]})
    state = EngineState(version="0.32.0", max_model_len=2048)
    with pytest.raises(WorkloadError, match=r"context of 2,048 \(the baseline's max_model_len.*bucket 'huge'"):
        design(dep(["--max-num-seqs", "2"]), "max_num_seqs", None, w, direction="up", state=state)
    ok = design(dep(["--max-num-seqs", "2"]), "max_num_seqs", None, w, direction="up",
                state=EngineState(version="0.32.0", max_model_len=8192))
    assert ok.value == 8


def test_advisor_load_refuses_before_sizing_a_prompt_past_the_targets_context(tmp_path):
    """The fake engine states max_model_len 4096 in /v1/models, as vLLM does."""
    wf = tmp_path / "w.yaml"
    wf.write_text(yaml.safe_dump({"name": "long", "requests": 4, "arrival": {"kind": "concurrency", "concurrency": 1},
                                  "buckets": [{"name": "book", "prompt_tokens": [5000, 6000],
                                               "output_tokens": [16, 16]}]}))
    with fake_server() as url:
        r = run_cli("load", "--target", url, "--workload", str(wf), data_dir=tmp_path / "data", timeout=60)
    assert_one_line_error(r, code=r.code, contains="context of 4,096")
    assert r.code != 0 and "bucket 'book'" in r.stderr and f"{url}/v1/models" in r.stderr, r.stderr
