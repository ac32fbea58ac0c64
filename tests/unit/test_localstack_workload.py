"""The local demo declares the traffic it drives, so that its experiments replay a system prompt that
the engine's metrics cannot show while prefix caching is off; and its words go through as tokens."""

import pytest

from advisor.localstack import __main__ as localstack
from advisor.workload.spec import load_workload


def test_the_declared_workload_is_the_driven_traffic(tmp_path):
    args = localstack.parse_args(["--prompt-words", "300", "--system-prompt-words", "250", "--concurrency", "12"])
    w = load_workload(localstack.write_workload(args, tmp_path / "w.yaml"))
    assert w.prefix is not None and (w.prefix.tokens, w.prefix.share, w.prefix.groups) == (250, 1.0, 1)
    assert w.arrival.concurrency == 12 and w.requests == args.requests
    assert [(b.prompt_tokens, b.output_tokens) for b in w.buckets] == [((300, 300), (128, 128))]
    none = localstack.parse_args(["--system-prompt-words", "0"])
    assert load_workload(localstack.write_workload(none, tmp_path / "n.yaml")).prefix is None


def test_a_system_prompt_longer_than_the_prompt_is_refused(capsys):
    with pytest.raises(SystemExit) as e:
        localstack.parse_args(["--prompt-words", "100", "--system-prompt-words", "100"])
    assert e.value.code == 2 and "--system-prompt-words" in capsys.readouterr().err


def test_the_engine_runs_without_prefix_caching_unless_asked():
    assert not localstack.parse_args([]).prefix_caching and localstack.parse_args(["--prefix-caching"]).prefix_caching
