"""advisor model inspect on real safetensors checkpoints: the tiny model (BF16, written by
scripts/build_tiny_model.py) and its FP8 twin as vLLM reads one (scripts/build_tiny_fp8.py: FP8 E4M3
linear weights with per-tensor scales, quantization_config quant_method fp8); both made by
scripts/setup-engine.sh, which scripts/setup.sh runs."""

import json
import struct

import pytest

from advisor.localstack import paths
from advisor.models.inspect import inspect


def real(path):
    assert (path / "config.json").is_file(), f"{path} is missing: scripts/setup-engine.sh (run by scripts/setup.sh) makes it"
    return path


def tensor_bytes(folder) -> int:
    """The bytes of tensor data on disk: the file less its 8-byte length and its JSON header."""
    total = 0
    for f in folder.glob("*.safetensors"):
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
        total += f.stat().st_size - 8 - n
    return total


@pytest.mark.parametrize("which", ["bf16", "fp8"])
def test_bits_per_weight_match_the_bytes_on_disk(which):
    folder = real(paths.tiny_model_dir() if which == "bf16" else paths.tiny_fp8_dir())
    r = inspect(folder)
    on_disk = tensor_bytes(folder)
    assert r.bytes == on_disk
    assert abs(r.bpw - 8 * on_disk / r.params) <= 0.005 * r.bpw
    assert r.params == 4_133_120  # the same logical weights in both


def test_the_fp8_checkpoint_reads_in_four_layers():
    r = inspect(real(paths.tiny_fp8_dir()))
    assert r.container.startswith("safetensors") and r.quantization_config["quant_method"] == "fp8"
    assert r.recipe.startswith("FP8 weights (e4m3), per-tensor scales")
    assert r.pattern == "mostly FP8 E4M3; BF16 on output, embeddings"
    roles = {row.role: row for row in r.roles}
    assert set(roles["attn_q"].formats) == {"FP8 E4M3"} and 8.0 <= roles["attn_q"].bpw < 8.01  # the scale is 4 bytes
    assert set(roles["embeddings"].formats) == {"BF16"}
    assert 8.5 < r.bpw < 8.8  # FP8 linears, BF16 embeddings and output


def test_the_bf16_checkpoint_is_the_unquantized_source():
    r = inspect(real(paths.tiny_model_dir()))
    assert r.recipe == "none: unquantized BF16" and r.bpw == 16.0
    assert json.loads((paths.tiny_model_dir() / "config.json").read_text())["dtype"] == "bfloat16"
