"""The served model's structure from real config.json files: attention layout, KV heads, experts,
MTP layers, and the KV cache bytes per token that follow (checked by hand below each case)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from advisor.models import ModelConfigError, config_path, model_args, parse, read

FIXTURES = Path(__file__).parent.parent / "fixtures" / "models"
TINY = {"architectures": ["LlamaForCausalLM"], "dtype": "bfloat16", "head_dim": 32, "hidden_size": 256,
        "model_type": "llama", "num_attention_heads": 8, "num_hidden_layers": 4, "num_key_value_heads": 2}


@pytest.mark.parametrize("name, attention, ratio, kv_bytes", [
    # 2 (K, V) x layers x KV heads x head_dim x bytes
    ("llama-2-7b-hf", "MHA", 1.0, 2 * 32 * 32 * 128 * 2),     # 512 KiB per token
    ("falcon-7b", "MQA", 71.0, 2 * 32 * 1 * 64 * 2),           # head_dim 4544 / 71 = 64
    ("mixtral-8x7b-v0.1", "GQA", 4.0, 2 * 32 * 8 * 128 * 2),
    ("deepseek-v3", "MLA", 1.0, 61 * (512 + 64) * 2),          # one latent + the RoPE key, no K/V pair
])
def test_attention_layout_and_kv_bytes_per_token(name, attention, ratio, kv_bytes):
    m = read(FIXTURES / f"{name}.json")
    assert m.attention == attention and m.gqa_ratio == ratio
    assert m.kv_bytes_per_token() == kv_bytes
    assert m.kv_bytes_per_token("fp8") == kv_bytes // 2


def test_moe_and_mtp_facts():
    mixtral = read(FIXTURES / "mixtral-8x7b-v0.1.json")
    assert (mixtral.experts, mixtral.experts_per_token, mixtral.shared_experts, mixtral.mtp_layers) == (8, 2, None, 0)
    ds = read(FIXTURES / "deepseek-v3.json")
    assert (ds.experts, ds.experts_per_token, ds.shared_experts, ds.mtp_layers) == (256, 8, 1, 1)
    assert ds.quantization["quant_method"] == "fp8" and ds.dtype == "bfloat16"
    assert "MoE, 256 experts, 8 per token, 1 shared; 1 MTP layer" in ds.describe()
    assert read(FIXTURES / "llama-2-7b-hf.json").experts is None


def test_the_tiny_models_gqa(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    m = read(tmp_path)
    assert (m.attention, m.attention_heads, m.kv_heads, m.gqa_ratio) == ("GQA", 8, 2, 4.0)
    assert m.kv_bytes_per_token() == 2 * 4 * 2 * 32 * 2
    assert m.kv_bytes_per_token("auto") == 1024 and m.kv_bytes_per_token("weird") is None
    nested = parse({"architectures": ["LlavaForConditionalGeneration"], "text_config": TINY})
    assert nested.attention == "GQA" and nested.architecture == "LlavaForConditionalGeneration"


@pytest.mark.parametrize("content, message", [
    ("{", "not valid JSON (line 1"),
    ("[1]", "not a JSON object"),
    ('{"model_type": "bert-ish"}', "no num_hidden_layers, hidden_size, num_attention_heads"),
])
def test_bad_configs_are_one_line(tmp_path, content, message):
    (tmp_path / "config.json").write_text(content)
    with pytest.raises(ModelConfigError, match=re.escape(message)):
        read(tmp_path)
    with pytest.raises(ModelConfigError, match="no such file"):
        read(tmp_path / "missing")


def test_configs_are_found_locally_and_in_the_hub_cache(tmp_path, monkeypatch):
    local = tmp_path / "my-model"
    local.mkdir()
    (local / "config.json").write_text(json.dumps(TINY))
    assert config_path(str(local)) == local / "config.json"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    snap = tmp_path / "hf" / "hub" / "models--org--name" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(TINY))
    (snap.parent.parent / "refs").mkdir()
    (snap.parent.parent / "refs" / "main").write_text("abc123\n")
    assert config_path("org/name") == snap / "config.json"
    assert config_path("org/absent") is None and config_path(str(tmp_path / "nothing")) is None


def test_the_model_an_argv_serves():
    assert model_args(["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m", "--port", "1"]) == "/m"
    assert model_args(["vllm", "serve", "org/name", "--port", "1"]) == "org/name"
    assert model_args(["--model=/x"]) == "/x" and model_args(["--port", "1"]) is None
    assert model_args(["/opt/llama.cpp/bin/llama-server", "-m", "/m.gguf", "--port", "1"]) == "/m.gguf"
    assert model_args(["python", "-m", "vllm.entrypoints.openai.api_server"]) is None, "a module, not a model"
    # With the engine's own model flags (the catalog's), as a deployment spec's argv is read.
    sglang = ["python", "-m", "sglang.launch_server", "--model-path", "/s", "--port", "1"]
    assert model_args(sglang) is None and model_args(sglang, ("--model-path", "--model")) == "/s"


def test_falcons_new_decoder_and_chatglms_groups_are_not_mqa():
    # Falcon-40B's shape: multi_query set, but the new decoder reads num_kv_heads (8 groups).
    falcon40 = parse({"model_type": "falcon", "hidden_size": 8192, "num_attention_heads": 128, "num_hidden_layers": 60,
                      "multi_query": True, "new_decoder_architecture": True, "num_kv_heads": 8,
                      "torch_dtype": "bfloat16"})
    assert (falcon40.attention, falcon40.kv_heads) == ("GQA", 8)
    glm = parse({"model_type": "chatglm", "hidden_size": 4096, "num_attention_heads": 32, "num_layers": 28,
                 "multi_query_attention": True, "multi_query_group_num": 2, "torch_dtype": "float16"})
    assert (glm.attention, glm.kv_heads, glm.gqa_ratio) == ("GQA", 2, 16.0)


def test_an_unreadable_candidate_is_skipped_not_fatal(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from advisor.models import served_structure

    good = tmp_path / "good"
    good.mkdir()
    (good / "config.json").write_text(json.dumps(TINY))
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text("{")
    snap = SimpleNamespace(target="http://127.0.0.1:8000", model=None,
                           engine=SimpleNamespace(roots=[str(bad), str(good)], models=[]))
    m, note = served_structure(snap)
    assert m is not None and m.kv_heads == 2 and note is None
    snap.engine.roots = [str(bad)]
    m, note = served_structure(snap)
    assert m is None and "not valid JSON" in note
    remote = SimpleNamespace(target="http://10.0.0.5:8000", model=None,
                             engine=SimpleNamespace(roots=[str(good)], models=[]))
    assert served_structure(remote)[0] is None, "a remote engine's root is not this host's folder"
