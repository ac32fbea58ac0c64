"""What the dashboard's actions ask the experiment service for, and what its confirmation shows:
the flags a candidate changes, one line each."""

import pytest

from advisor.app.watched import ActionError, CheckRef, request_for
from advisor.fleet.config import WatchedDeployment
from advisor.knobs.argv import flag_changes


def test_flag_changes_pairs_flags_with_their_values():
    assert flag_changes(["vllm", "serve", "--max-num-seqs", "2", "--enforce-eager"],
                        ["vllm", "serve", "--max-num-seqs", "8", "--enforce-eager"]) == ["--max-num-seqs 2 -> 8"]
    assert flag_changes(["--no-enable-prefix-caching", "--x", "1"], ["--enable-prefix-caching", "--x", "1"]) == [
        "--no-enable-prefix-caching (removed)", "--enable-prefix-caching (added)"]
    assert flag_changes(["--a=1"], ["--a=2", "--kv-cache-dtype", "fp8"]) == ["--a 1 -> 2", "--kv-cache-dtype fp8 (added)"]
    assert flag_changes(["--a", "1"], ["--a", "1"]) == []


def test_the_request_carries_the_check_and_the_limits(tmp_path):
    spec = tmp_path / "dep.yaml"
    w = WatchedDeployment.model_validate({"name": "local", "prom_url": "http://p:9090", "deployment": spec,
                                          "experiments": {"blocks": 4, "fixed": True}})
    r = request_for(w, CheckRef("max_num_seqs", "up", "ttft_p95"), 7)
    assert (r.deployment, r.mechanism, r.direction, r.readout) == (spec, "max_num_seqs", "up", "ttft_p95")
    assert (r.from_prom, r.blocks, r.fixed, r.diagnosis_id) == ("http://p:9090", 4, True, 7)
    assert r.value is None, "the value is derived from the baseline and the check's direction"
    # advisor.yaml's readout wins over the check's
    w.experiments.readout = "e2e_p99"
    assert request_for(w, CheckRef("max_num_seqs", "up", "ttft_p95"), None).readout == "e2e_p99"


def test_a_deployment_without_a_spec_cannot_run_experiments():
    w = WatchedDeployment.model_validate({"name": "local", "prom_url": "http://p:9090"})
    with pytest.raises(ActionError, match="no deployment spec"):
        request_for(w, CheckRef("max_num_seqs", "up", None), None)
