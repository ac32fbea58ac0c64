from advisor.experiments import quality
from tests.support.servers import fake_server


def test_identical_outputs():
    q = quality.compare([["a", "b"], ["c"]], [["a", "b"], ["c"]])
    assert q.exact_match == 1.0 and q.token_agreement == 1.0 and "identical" in q.note


def test_partly_different_outputs():
    q = quality.compare([["a", "b", "c", "d"], ["x"]], [["a", "b", "z", "d"], ["x"]])
    assert q.exact_match == 0.5
    assert q.token_agreement == 4 / 5
    assert "1 of 2 greedy outputs differ" in q.note


def test_length_mismatch_counts_missing_positions_as_disagreement():
    q = quality.compare([["a", "b", "c"]], [["a"]])
    assert q.token_agreement == 1 / 3


def test_greedy_reads_every_prompt():
    with fake_server("--tokens", "4") as url:
        outs = quality.greedy(url, "fake", max_tokens=4)
    assert len(outs) == len(quality.PROMPTS) and all(outs)
