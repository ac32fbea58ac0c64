"""advisor model inspect on safetensors checkpoints written here byte by byte (the format is a
length, a JSON header and the data): an unquantized BF16 model, an AWQ-style packed 4-bit one with
its scales and zero points, an FP8 checkpoint whose embeddings and output stay BF16, and files that
are truncated, not safetensors, or whose header lies about sizes."""

import json
import math
import struct

import pytest
from typer.testing import CliRunner

from advisor.cli import app
from advisor.models.inspect import inspect
from advisor.models.safetensors import DTYPE_BITS, SafetensorsError

runner = CliRunner()


def write(path, tensors: dict[str, tuple[str, list[int]]], metadata=None, lie: int = 0, cut: int = 0):
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        n = math.ceil(math.prod(shape) * DTYPE_BITS[dtype] / 8)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n + lie]}
        offset += n
    if metadata:
        header["__metadata__"] = metadata
    raw = json.dumps(header).encode()
    data = struct.pack("<Q", len(raw)) + raw + bytes(offset)
    path.write_bytes(data[: len(data) - cut] if cut else data)


def layer_names(i: int, suffix: str = "weight") -> list[str]:
    return [f"model.layers.{i}.self_attn.{p}.{suffix}" for p in ("q_proj", "k_proj", "v_proj", "o_proj")] + \
        [f"model.layers.{i}.mlp.{p}.{suffix}" for p in ("gate_proj", "up_proj", "down_proj")]


def dense(dtype="BF16") -> dict:
    t = {"model.embed_tokens.weight": (dtype, [512, 64]), "lm_head.weight": (dtype, [512, 64]),
         "model.norm.weight": (dtype, [64])}
    for i in range(2):
        for name in layer_names(i):
            t[name] = (dtype, [64, 64])
    return t


def test_an_unquantized_checkpoint(tmp_path):
    write(tmp_path / "model.safetensors", dense(), metadata={"format": "pt"})
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "torch_dtype": "bfloat16"}))
    r = inspect(tmp_path)
    assert r.container == "safetensors + config.json" and r.files == 1 and r.metadata == {"format": "pt"}
    assert r.recipe == "none: unquantized BF16" and r.pattern.startswith("uniform BF16")
    assert r.bpw == 16.0 and r.params == 2 * 512 * 64 + 64 + 14 * 64 * 64
    roles = {x.role: x for x in r.roles}
    assert roles["attn_q"].formats == {"BF16": 2} and roles["ffn_down"].params == 2 * 64 * 64
    assert r.calibration == "none (not quantized)"


def test_awq_packed_4_bit_counts_logical_weights_and_its_side_data(tmp_path):
    t = {"model.embed_tokens.weight": ("F16", [512, 64]), "lm_head.weight": ("F16", [512, 64]),
         "model.norm.weight": ("F16", [64])}
    for i in range(2):
        for base in (n[: -len(".weight")] for n in layer_names(i)):
            t[f"{base}.qweight"] = ("I32", [64, 8])  # 64 x 64 4-bit weights, 8 per int32
            t[f"{base}.scales"] = ("F16", [1, 64])  # group 64: one scale per column
            t[f"{base}.qzeros"] = ("I32", [1, 8])
    write(tmp_path / "model.safetensors", t)
    q = {"quant_method": "awq", "bits": 4, "group_size": 64, "zero_point": True, "version": "gemm"}
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": q}))
    r = inspect(tmp_path)
    assert r.recipe == "AWQ 4-bit, group 64, zero points yes, version gemm"
    roles = {x.role: x for x in r.roles}
    assert roles["attn_q"].formats == {"INT4 (packed)": 2} and roles["attn_q"].params == 2 * 64 * 64
    # 4 bits, plus a 16-bit scale and a 4-bit zero per 64 weights: 4.3125 bits per weight.
    assert roles["attn_q"].bpw == pytest.approx(4 + 16 / 64 + 4 / 64)
    assert roles["embeddings"].formats == {"F16": 1}
    assert r.pattern == "mostly INT4 (packed); F16 on embeddings, output"
    assert 4 < r.bpw < 16
    assert r.calibration == "not recorded in quantization_config"


def test_fp8_with_bf16_embeddings_is_a_mixed_allocation_and_the_name_is_checked(tmp_path):
    t = dense("BF16")
    for i in range(2):
        for name in layer_names(i):
            t[name] = ("F8_E4M3", [64, 64])
            t[name.replace(".weight", ".weight_scale")] = ("F32", [])
    folder = tmp_path / "tiny-4bit"  # a name that claims 4 bits: the bytes say 8
    folder.mkdir()
    write(folder / "model.safetensors", t)
    q = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3"}
    (folder / "config.json").write_text(json.dumps({"quantization_config": q}))
    r = inspect(folder)
    assert r.recipe.startswith("FP8 weights (e4m3), per-tensor scales, dynamic")
    assert r.pattern == "mostly FP8 E4M3; BF16 on embeddings, output"
    roles = {x.role: x for x in r.roles}
    assert roles["attn_k"].bpw == pytest.approx(8 + 32 / (64 * 64))
    assert r.name_bpw == 4.0 and r.bpw > 8
    text = r.text()
    assert "the name suggests 4" in text and "FP8 E4M3 x2" in text


@pytest.mark.parametrize("damage, message", [
    ({"cut": 10}, "lies outside the file's"),
    ({"lie": 2}, "a header that lies about sizes"),
])
def test_damaged_files_are_one_clear_line(tmp_path, damage, message):
    write(tmp_path / "model.safetensors", dense(), **damage)
    with pytest.raises(SafetensorsError, match=message):
        inspect(tmp_path / "model.safetensors")


def test_the_cli_reads_text_and_json_and_refuses_bad_files_with_exit_2(tmp_path):
    write(tmp_path / "model.safetensors", dense())
    r = runner.invoke(app, ["model", "inspect", str(tmp_path)])
    assert r.exit_code == 0 and "bits per weight: 16.000" in r.stdout
    r = runner.invoke(app, ["model", "inspect", str(tmp_path), "-o", "json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["bpw"] == 16.0
    (tmp_path / "junk.safetensors").write_bytes(b"GGUF" + bytes(40))
    r = runner.invoke(app, ["model", "inspect", str(tmp_path / "junk.safetensors")])
    assert r.exit_code == 2 and "not a safetensors file" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = runner.invoke(app, ["model", "inspect", str(tmp_path / "none")])
    assert r.exit_code == 2 and "no such file or folder" in r.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "weights.bin").write_bytes(b"x")
    r = runner.invoke(app, ["model", "inspect", str(empty)])
    assert r.exit_code == 2 and "no *.safetensors files (found .bin)" in r.stderr
