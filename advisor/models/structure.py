"""The served model's structure from its config.json: attention heads and KV heads (MHA, GQA, MQA,
or DeepSeek's latent attention), experts (MoE), multi-token-prediction layers, sizes, dtype and
quantization config; and what that costs in KV cache per token.

One reader for the advisor: the diagnosis's model facts and `advisor model inspect` both start
here. Field names follow the Hugging Face configs of the families vLLM serves (Llama, Mistral,
Mixtral, Qwen2/3 and their MoE, DeepSeek V2/V3, Falcon, GPT-2 style); a text model nested in a
multimodal config (`text_config`) is read from there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from advisor.errors import AdvisorError
from advisor.inputs import MAX_CONFIG_BYTES, open_input

Attention = Literal["MHA", "GQA", "MQA", "MLA"]
# Bytes per element of the KV cache by vLLM's --kv-cache-dtype; "auto" follows the model's dtype.
KV_DTYPE_BYTES = {"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1, "float16": 2, "bfloat16": 2, "half": 2,
                  "float32": 4, "float": 4}


class ModelConfigError(AdvisorError):
    pass


class ModelStructure(BaseModel):
    source: str = Field(description="the config.json read")
    model_type: str | None = None
    architecture: str | None = None
    layers: int
    hidden_size: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    attention: Attention
    kv_lora_rank: int | None = Field(default=None, description="MLA: the latent that is cached instead of K and V")
    rope_head_dim: int | None = None
    experts: int | None = Field(default=None, description="routed experts per MoE layer")
    experts_per_token: int | None = None
    shared_experts: int | None = None
    mtp_layers: int = Field(default=0, description="multi-token-prediction (next-n) layers, usable as a draft")
    dtype: str | None = None
    quantization: dict | None = Field(default=None, description="quantization_config as the checkpoint declares it")
    max_position_embeddings: int | None = None

    @property
    def gqa_ratio(self) -> float:
        """Query heads per KV head: 1 for MHA, the head count for MQA."""
        return self.attention_heads / self.kv_heads

    def kv_elements_per_token(self) -> int:
        """Cached elements per token over all layers: K and V per KV head, or MLA's one latent."""
        if self.attention == "MLA":
            return self.layers * (self.kv_lora_rank + (self.rope_head_dim or 0))
        return 2 * self.layers * self.kv_heads * self.head_dim

    def kv_bytes_per_token(self, kv_cache_dtype: str | None = "auto") -> int | None:
        """At the KV cache's dtype (vLLM's cache_dtype; auto: the model's). None when unknown."""
        size = element_bytes(kv_cache_dtype, self.dtype)
        return None if size is None else self.kv_elements_per_token() * size

    def describe(self) -> str:
        attn = {"MHA": "multi-head attention (every query head has its own K and V)",
                "GQA": f"grouped-query attention, {self.attention_heads}:{self.kv_heads}",
                "MQA": "multi-query attention (one K and V head)",
                "MLA": f"multi-head latent attention (a {self.kv_lora_rank}-wide latent cached)"}[self.attention]
        moe = (f"; MoE, {self.experts} experts, {self.experts_per_token} per token"
               + (f", {self.shared_experts} shared" if self.shared_experts else "")) if self.experts else ""
        mtp = f"; {self.mtp_layers} MTP layer{'s' if self.mtp_layers != 1 else ''}" if self.mtp_layers else ""
        return f"{self.layers} layers, hidden {self.hidden_size}, {attn}{moe}{mtp}"


def element_bytes(kv_cache_dtype: str | None, model_dtype: str | None) -> int | None:
    d = (kv_cache_dtype or "auto").lower()
    if d == "auto":
        d = (model_dtype or "").lower()
    return KV_DTYPE_BYTES.get(d)


def _int(cfg: dict, *keys: str) -> int | None:
    for k in keys:
        v = cfg.get(k)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def parse(cfg: dict, source: str = "config.json") -> ModelStructure:
    """A config.json's structure; ModelConfigError naming what is missing."""
    if not isinstance(cfg, dict):
        raise ModelConfigError(f"{source}: not a JSON object")
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    layers = _int(text, "num_hidden_layers", "n_layer", "num_layers")
    heads = _int(text, "num_attention_heads", "n_head")
    hidden = _int(text, "hidden_size", "n_embd", "d_model")
    if layers is None or hidden is None or heads is None:
        missing = [n for n, v in (("num_hidden_layers", layers), ("hidden_size", hidden),
                                  ("num_attention_heads", heads)) if v is None]
        raise ModelConfigError(f"{source}: not a transformer config this reader knows (no {', '.join(missing)})")
    kv_lora = _int(text, "kv_lora_rank")
    if text.get("multi_query") is True and not text.get("new_decoder_architecture"):  # Falcon-7B, StarCoder
        kv_heads = 1
    elif text.get("multi_query_attention") is True:  # ChatGLM
        kv_heads = _int(text, "multi_query_group_num") or 1
    else:  # Falcon-40B/180B: new_decoder_architecture with num_kv_heads
        kv_heads = _int(text, "num_key_value_heads", "num_kv_heads", "n_head_kv") or heads
    head_dim = _int(text, "head_dim") or hidden // heads
    if kv_lora:
        attention: Attention = "MLA"
    elif kv_heads == heads:
        attention = "MHA"
    elif kv_heads == 1:
        attention = "MQA"
    else:
        attention = "GQA"
    experts = _int(text, "num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
    dtype = text.get("dtype") or text.get("torch_dtype") or cfg.get("dtype") or cfg.get("torch_dtype")
    quant = cfg.get("quantization_config") if isinstance(cfg.get("quantization_config"), dict) else None
    arch = cfg.get("architectures")
    return ModelStructure(
        source=source, model_type=cfg.get("model_type"), architecture=arch[0] if isinstance(arch, list) and arch else None,
        layers=layers, hidden_size=hidden, attention_heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        attention=attention, kv_lora_rank=kv_lora, rope_head_dim=_int(text, "qk_rope_head_dim") if kv_lora else None,
        experts=experts if experts and experts > 1 else None,
        experts_per_token=_int(text, "num_experts_per_tok", "moe_top_k", "num_experts_per_token") if experts else None,
        shared_experts=_int(text, "n_shared_experts", "num_shared_experts") if experts else None,
        mtp_layers=_int(text, "num_nextn_predict_layers", "mtp_num_hidden_layers") or 0,
        dtype=str(dtype) if dtype else None, quantization=quant,
        max_position_embeddings=_int(text, "max_position_embeddings", "n_positions"))


def _load(path: Path) -> tuple[dict, Path]:
    file = path / "config.json" if path.is_dir() else path
    if not file.exists():
        raise ModelConfigError(f"{file}: no such file")
    try:
        # Not a FIFO or a device (open_input): a config.json is a file, read whole and bounded.
        with open_input(file, ModelConfigError, MAX_CONFIG_BYTES) as f:
            raw = json.loads(f.read(MAX_CONFIG_BYTES + 1).decode("utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ModelConfigError(f"{file}: cannot read it ({e})") from None
    except json.JSONDecodeError as e:
        raise ModelConfigError(f"{file}: not valid JSON (line {e.lineno}: {e.msg})") from None
    if not isinstance(raw, dict):
        raise ModelConfigError(f"{file}: not a JSON object")
    return raw, file


def read(path: Path) -> ModelStructure:
    """config.json at path (a file, or a model folder holding one)."""
    raw, file = _load(path)
    return parse(raw, str(file))


def declared_quantization(path: Path) -> dict | None:
    """The quantization_config a checkpoint's config.json declares (also in a multimodal model's
    text_config), read even where the rest of the config is not a text model's."""
    raw, _ = _load(path)
    q = raw.get("quantization_config") or (raw.get("text_config") or {}).get("quantization_config")
    return q if isinstance(q, dict) else None
