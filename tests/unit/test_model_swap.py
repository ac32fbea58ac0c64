"""The quantization knob as a model-file swap: only the model path changes in the candidate's argv."""

from types import SimpleNamespace

import pytest

from advisor.experiments.arms import model_swap
from advisor.experiments.arms.model_swap import ModelSwapError
from advisor.experiments.result import MemoryReadout

MiB = 2**20


@pytest.fixture
def files(tmp_path):
    a, b = tmp_path / "m-Q8_0.gguf", tmp_path / "m-Q4_K_M.gguf"
    a.write_bytes(b"a")
    b.write_bytes(b"b")
    return a, b


def test_a_value_naming_a_file_is_a_model_swap_and_a_method_name_is_not(files):
    assert model_swap.candidate_path("quantization", str(files[1])) == files[1]
    assert model_swap.candidate_path("quantization", "awq") is None
    assert model_swap.candidate_path("max_num_seqs", str(files[1])) is None  # not a knob that takes a file
    with pytest.raises(ModelSwapError, match="no such model file or folder"):
        model_swap.candidate_path("quantization", "gone-Q4_K_M.gguf")


def test_llama_server_swaps_the_path_after_m_and_nothing_else(files):
    a, b = files
    base = ["-m", str(a), "--alias", "tiny", "-np", "2"]
    assert model_swap.swap(base, ["llama-server"], "llamacpp", b) == ["-m", str(b), "--alias", "tiny", "-np", "2"]
    assert model_swap.swap([f"--model={a}", "-t", "2"], ["llama-server"], "llamacpp", b) == [f"--model={b}", "-t", "2"]


def test_vllm_keeps_the_served_name_of_the_model_it_replaces(files):
    a, b = files
    out = model_swap.swap(["serve", str(a), "--max-num-seqs", "2"], ["vllm"], "vllm", b)
    assert out == ["serve", str(b), "--max-num-seqs", "2", "--served-model-name", str(a)]
    named = ["--model", str(a), "--served-model-name", "tiny"]
    assert model_swap.swap(named, ["python", "-m", "vllm.entrypoints.openai.api_server"], "vllm", b) == \
        ["--model", str(b), "--served-model-name", "tiny"]


def test_the_same_model_or_no_model_in_the_args_is_refused(files):
    a, _ = files
    with pytest.raises(ModelSwapError, match="already serves: nothing to test"):
        model_swap.swap(["-m", str(a)], ["llama-server"], "llamacpp", a)
    with pytest.raises(ModelSwapError, match="it is in local.command"):
        model_swap.swap(["-np", "2"], ["llama-server", "-m", str(a)], "llamacpp", files[1])


def tpot(verdict, ratio=1.0):
    return SimpleNamespace(verdict=verdict, ratio=ratio, statistic="p95")


def test_memory_fell_and_tpot_did_not_reads_as_dequantization_eating_the_gain():
    m = MemoryReadout(baseline_bytes=70 * MiB, candidate_bytes=70 * MiB, baseline_weights_bytes=4 * MiB,
                      candidate_weights_bytes=2 * MiB)
    text = model_swap.explain(m, tpot("no change", 1.01), "Kernels are slow.")
    assert text.startswith("dequantization ate the gain: resident weights fell 50% (4.0 -> 2.0 MiB)")
    assert "TPOT p95 did not fall (ratio 1.01, no change). Kernels are slow." in text
    assert "may have eaten" in model_swap.explain(m, tpot("inconclusive"), "")
    assert model_swap.explain(m, tpot("improved", 0.7), "") is None


def test_without_mapped_weights_the_whole_resident_memory_is_read():
    fell = MemoryReadout(baseline_bytes=100 * MiB, candidate_bytes=60 * MiB)
    assert "resident memory fell 40%" in model_swap.explain(fell, tpot("regressed", 1.2), "")
    same = MemoryReadout(baseline_bytes=100 * MiB, candidate_bytes=99 * MiB)
    assert model_swap.explain(same, tpot("regressed", 1.2), "") is None  # 1%: the allocator's noise


def test_gpu_memory_is_read_where_no_weights_are_mapped():
    m = MemoryReadout(baseline_bytes=100 * MiB, candidate_bytes=100 * MiB, baseline_gpu_bytes=40 * MiB,
                      candidate_gpu_bytes=20 * MiB)
    assert "GPU memory fell 50%" in model_swap.explain(m, tpot("no change"), "")
