"""What the dashboard's confirmation shows: the flags a candidate changes, one line each."""

from advisor.fleet.actions import CheckRef, _argv, flag_changes
from advisor.fleet.config import WatchedDeployment


def test_flag_changes_pairs_flags_with_their_values():
    assert flag_changes(["vllm", "serve", "--max-num-seqs", "2", "--enforce-eager"],
                        ["vllm", "serve", "--max-num-seqs", "8", "--enforce-eager"]) == ["--max-num-seqs 2 -> 8"]
    assert flag_changes(["--no-enable-prefix-caching", "--x", "1"], ["--enable-prefix-caching", "--x", "1"]) == [
        "--no-enable-prefix-caching (removed)", "--enable-prefix-caching (added)"]
    assert flag_changes(["--a=1"], ["--a=2", "--kv-cache-dtype", "fp8"]) == ["--a 1 -> 2", "--kv-cache-dtype fp8 (added)"]
    assert flag_changes(["--a", "1"], ["--a", "1"]) == []


def test_experiment_command_carries_the_check_and_the_limits(tmp_path):
    spec = tmp_path / "dep.yaml"
    w = WatchedDeployment.model_validate({"name": "local", "prom_url": "http://p:9090", "deployment": spec,
                                          "experiments": {"blocks": 4, "fixed": True}})
    argv = _argv(w, CheckRef("max_num_seqs", "up", "ttft_p95"), 7)
    text = " ".join(argv)
    assert "--mechanism max_num_seqs --from-prom http://p:9090" in text and "--direction up" in text
    assert "--readout ttft_p95" in text and "--blocks 4" in text and "--fixed" in argv and "--diagnosis 7" in text
    assert "--value" not in argv, "the value is derived from the baseline and the check's direction"
