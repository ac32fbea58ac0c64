"""Write the tiny model (scripts/build_tiny_model.py) as an F16 GGUF with gguf.GGUFWriter, with the
tokenizer metadata llama.cpp needs, and the calibration text llama-imatrix reads.

llama.cpp's own convert_hf_to_gguf.py rejects the tiny model's tokenizer (it knows pre-tokenizers by
the hash of a test string), so the conversion is done here, as convert_hf_to_gguf.py does it for a
Llama: the same tensor names, q and k rows permuted for llama.cpp's rotary layout, 1-d tensors in
F32, the byte-level BPE vocabulary and merges as a "gpt2" tokenizer with GPT-2's pre-tokenizer.
Runs in the advisor's venv (gguf, numpy); no torch.

    build_tiny_gguf.py MODEL_DIR OUT.gguf [--calibration OUT.txt]
"""

from __future__ import annotations

import argparse
import json
import random
import struct
from pathlib import Path

import numpy as np

CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
_NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
          "lm_head.weight": "output.weight"}
_LAYER = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
          "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
          "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, spec in header.items():
        begin, end = spec["data_offsets"]
        data = raw[8 + n + begin:8 + n + end]
        if spec["dtype"] == "BF16":
            a = (np.frombuffer(data, np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif spec["dtype"] in ("F32", "F16"):
            a = np.frombuffer(data, np.float32 if spec["dtype"] == "F32" else np.float16).astype(np.float32)
        else:
            raise SystemExit(f"{path}: tensor {name} is {spec['dtype']}; this script converts float checkpoints")
        out[name] = a.reshape(spec["shape"])
    return out


def permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF's rotary halves -> llama.cpp's interleaved pairs (convert_hf_to_gguf.py LlamaModel.permute)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_name(name: str) -> str:
    if name in _NAMES:
        return _NAMES[name]
    parts = name.split(".")  # model.layers.N.<module>.weight
    return f"blk.{parts[2]}.{_LAYER['.'.join(parts[3:-1])]}.{parts[-1]}"


def calibration_text(lines: int = 400, seed: int = 1) -> str:
    """Text in the tiny tokenizer's own words (build_tiny_model.py's corpus, another seed)."""
    rng = random.Random(seed)
    words = ["the", "model", "serves", "tokens", "queue", "latency", "cache", "prefix", "batch", "decode",
             "prefill", "request", "gpu", "memory", "throughput", "scheduler", "kernel", "attention",
             "a", "of", "and", "to", "in", "is", "for", "on", "with", "as", "by", "at", "from", "it"]
    return "\n".join(" ".join(rng.choice(words) + rng.choice(["", "s", "ed", "ing", "er"]) for _ in range(20))
                     for _ in range(lines)) + "\n"


def main() -> None:
    import gguf

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--calibration", type=Path)
    a = p.parse_args()
    cfg = json.loads((a.model / "config.json").read_text())
    tok = json.loads((a.model / "tokenizer.json").read_text())
    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]

    vocab = dict(tok["model"]["vocab"])
    for t in tok.get("added_tokens", []):
        vocab[t["content"]] = t["id"]
    tokens = [None] * len(vocab)
    for text, i in vocab.items():
        tokens[i] = text
    if None in tokens or len(tokens) != cfg["vocab_size"]:
        raise SystemExit(f"{a.model}: the vocabulary ({len(vocab)} tokens) does not fill vocab_size {cfg['vocab_size']}")
    special = {t["id"] for t in tok.get("added_tokens", []) if t.get("special")}
    types = [gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL for i in range(len(tokens))]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]

    w = gguf.GGUFWriter(str(a.out), "llama")
    w.add_name(a.model.name)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_dimension_count(cfg.get("head_dim") or cfg["hidden_size"] // n_head)
    w.add_rope_freq_base(float((cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta", 10000.0))))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_vocab_size(cfg["vocab_size"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(cfg["bos_token_id"])
    w.add_eos_token_id(cfg["eos_token_id"])
    w.add_unk_token_id(vocab["<unk>"])
    w.add_pad_token_id(cfg["pad_token_id"])
    w.add_add_bos_token(False)  # the HF tokenizer adds none (its post-processor is the bare sequence)
    w.add_chat_template(CHAT_TEMPLATE)

    for name, t in sorted(read_safetensors(a.model / "model.safetensors").items()):
        if name.endswith("self_attn.q_proj.weight"):
            t = permute(t, n_head)
        elif name.endswith("self_attn.k_proj.weight"):
            t = permute(t, n_kv)
        w.add_tensor(gguf_name(name), t.astype(np.float16 if t.ndim == 2 else np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if a.calibration:
        a.calibration.write_text(calibration_text())


if __name__ == "__main__":
    main()
