"""advisor model inspect on real GGUF files: the tiny model written by scripts/build_tiny_gguf.py,
then quantized by llama.cpp's own llama-quantize (Q8_0, Q4_K_M), with an imatrix from llama-imatrix
(IQ4_XS), and a mixed per-tensor recipe in the Unsloth Dynamic style (UD-Q4_K_XL); all made by
scripts/setup-llamacpp.sh, which scripts/setup.sh runs."""

import json

import pytest
from typer.testing import CliRunner

from advisor.cli import app
from advisor.localstack import paths
from advisor.models.gguf_file import read
from advisor.models.inspect import inspect

runner = CliRunner()


def real(quant: str):
    path = paths.tiny_gguf(quant)
    assert path.is_file(), f"{path} is missing: scripts/setup-llamacpp.sh (run by scripts/setup.sh) makes it"
    return path


@pytest.mark.parametrize("quant", paths.GGUF_QUANTS)
def test_bits_per_weight_match_the_bytes_on_disk(quant):
    path = real(quant)
    r = inspect(path)
    header = read(path)
    on_disk = path.stat().st_size - header.data_offset  # the tensor data, with its alignment padding
    assert r.bytes <= on_disk
    assert abs(r.bpw - 8 * on_disk / r.params) <= 0.005 * r.bpw, (r.bpw, 8 * on_disk / r.params)
    assert r.params == 4_133_120  # the tiny Llama's weights, whatever the recipe
    assert r.container.startswith("GGUF v3")


def test_f16_is_the_unquantized_source():
    r = inspect(real("F16"))
    assert r.recipe.startswith("none: unquantized F16") and r.pattern == "uniform F16 (norms kept apart)"
    assert r.calibration.startswith("no imatrix recorded")


def test_q8_0_is_legacy_block_quant_without_an_imatrix():
    r = inspect(real("Q8_0"))
    assert r.recipe.startswith("llama.cpp file type Q8_0: legacy block quant Q8_0")
    assert r.pattern.startswith("uniform Q8_0") and r.bpw == pytest.approx(8.5, abs=0.05)
    assert r.calibration == "no imatrix recorded (no quantize.imatrix.* keys)"
    assert r.name_bpw == 8.0


def test_q4_k_m_is_a_k_quant_mix_and_more_than_four_bits():
    r = inspect(real("Q4_K_M"))
    assert r.recipe.startswith("llama.cpp file type Q4_K_M: K-quant")
    assert r.pattern.startswith("mostly Q4_K; Q6_K on "), r.pattern
    assert "Q6_K" in r.formats and "Q4_K" in r.formats
    assert r.name_bpw == 4.0 and r.bpw > 4.5, "the name says 4 bits; the bytes say more"


def test_iq4_xs_carries_its_imatrix():
    r = inspect(real("IQ4_XS"))
    assert "I-quant IQ4_XS" in r.recipe and r.recipe.endswith("quantized with an importance matrix")
    assert r.calibration.startswith("present: imatrix"), r.calibration
    assert "chunks" in r.calibration


def test_the_unsloth_style_recipe_is_recognised_as_mixed():
    r = inspect(real("UD-Q4_K_XL"))
    assert r.pattern.startswith("mostly Q4_K;") and "Q8_0 on " in r.pattern, r.pattern
    roles = {x.role: x for x in r.roles}
    assert roles["attn_v"].formats == {"Q8_0": 4} and roles["attn_k"].formats == {"Q8_0": 4}
    assert roles["ffn_down"].layers.get("Q8_0") == "0", roles["ffn_down"]
    assert roles["embeddings"].formats == {"Q8_0": 1}
    assert r.calibration.startswith("present: imatrix")
    q4km = inspect(real("Q4_K_M"))
    assert r.bpw > q4km.bpw, "more bits on the sensitive tensors"


def test_the_cli_explains_a_real_mixed_file():
    res = runner.invoke(app, ["model", "inspect", str(real("UD-Q4_K_XL"))])
    assert res.exit_code == 0, res.output
    text = res.stdout
    assert "recipe: llama.cpp file type Q4_K_M: K-quant" in text and "allocation: mostly Q4_K;" in text
    assert "bits per weight:" in text and "the name suggests 4" in text and "calibration: present: imatrix" in text
    body = json.loads(runner.invoke(app, ["model", "inspect", str(real("IQ4_XS")), "-o", "json"]).stdout)
    assert body["formats"]["IQ4_XS"] > 0


def llama_deployment(tmp_path, quant="Q8_0"):
    import yaml

    spec = {"name": "llama", "engine": "llamacpp", "model": "tiny-llama", "launcher": "local",
            "local": {"command": [str(paths.llama_cpp_bin("llama-server"))],
                      "args": ["-m", str(real(quant)), "--alias", "tiny-llama", "-np", "2"],
                      "port": paths.free_port(), "arms": "parallel", "candidate_port": paths.free_port()}}
    path = tmp_path / "dep.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_a_quantization_experiment_swaps_only_the_model_file_and_plans_both_arms_layers(tmp_path):
    r = runner.invoke(app, ["experiment", "--deployment", str(llama_deployment(tmp_path)), "--mechanism",
                            "quantization", "--value", str(real("Q4_K_M")), "--readout", "tpot_p50", "--dry-run"])
    assert r.exit_code == 0, r.output
    assert f"candidate argv: -m {real('Q4_K_M')} --alias tiny-llama -np 2" in r.output
    assert "baseline model: GGUF v3" in r.output and "uniform Q8_0" in r.output
    assert "candidate model: GGUF v3" in r.output and "mostly Q4_K;" in r.output


def test_a_quantization_experiment_to_the_baselines_own_file_is_refused(tmp_path):
    r = runner.invoke(app, ["experiment", "--deployment", str(llama_deployment(tmp_path)), "--mechanism",
                            "quantization", "--value", str(real("Q8_0"))])
    assert r.exit_code == 2 and "is the model the baseline already serves: nothing to test" in r.output, r.output


@pytest.mark.parametrize("quant", ["F16", "Q4_K_M"])
def test_the_structure_read_from_gguf_metadata_is_the_checkpoints(quant):
    from advisor.models.gguf_inspect import structure_gguf
    from advisor.models.structure import read as read_config

    g, hf = structure_gguf(real(quant)), read_config(paths.tiny_model_dir())
    for field in ("layers", "hidden_size", "attention_heads", "kv_heads", "head_dim", "attention", "experts"):
        assert getattr(g, field) == getattr(hf, field), field
    assert g.kv_bytes_per_token() == 2 * hf.layers * hf.kv_heads * hf.head_dim * 2  # F16 K and V


def test_a_diagnosis_of_llama_server_reads_its_models_structure_from_the_deployments_gguf(tmp_path):
    from types import SimpleNamespace

    from advisor.experiments.design.deployment import load_deployment
    from advisor.models.served import served_structure

    dep = load_deployment(llama_deployment(tmp_path, "Q4_K_M"))
    snap = SimpleNamespace(target="http://10.0.0.9:8080", model="tiny-llama",
                           engine=SimpleNamespace(roots=[], models=["tiny-llama"]))
    s, why = served_structure(snap, dep)
    assert why is None and s.source.endswith("tiny-llama-Q4_K_M.gguf (GGUF metadata)") and s.kv_heads == 2
