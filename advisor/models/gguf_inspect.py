"""A GGUF file in the map's four layers: the container (GGUF version, its metadata keys), each tensor's
GGML type as its numeric format, the weight-encoding recipe those types belong to (K-quant, I-quant,
legacy block quant ...), the allocation by role and by layer, and the imatrix that llama-quantize
records when it used one (`quantize.imatrix.*`). Bits per weight from the types' byte sizes, which
are the bytes on disk (gguf_file.py checks them against the file)."""

from __future__ import annotations

import re
from pathlib import Path

from advisor.models.four_layers import Inspection, RoleTally, name_bpw, pattern
from advisor.models.gguf_file import GGUFError, GGUFHeader, read
from advisor.models.structure import ModelConfigError, parse

# Recipe families of the GGML types (ggml/src/ggml-quants.c, gguf.constants.GGML_QUANT_SIZES).
_FAMILY = {
    **dict.fromkeys(("F32", "F16", "BF16", "F64"), "float"),
    **dict.fromkeys(("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1"), "legacy block quant"),
    **dict.fromkeys(("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K"), "K-quant"),
    **dict.fromkeys(("IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_NL", "IQ4_XS"),
                    "I-quant"),
    **dict.fromkeys(("TQ1_0", "TQ2_0"), "ternary"),
    **dict.fromkeys(("MXFP4", "NVFP4"), "microscaling FP4"),
    **dict.fromkeys(("I8", "I16", "I32", "I64"), "integer"),
    "Q1_0": "1-bit",
}
_HOW = {
    "legacy block quant": "blocks of 32 weights, one F16 scale each",
    "K-quant": "super-blocks of 256 weights, quantized scales (and minimums) per sub-block of 16 or 32",
    "I-quant": "importance-weighted codebooks (E8/D4 lattices, non-linear 4-bit), super-blocks of 256",
    "ternary": "weights in {-1, 0, 1} with a scale per block",
    "microscaling FP4": "FP4 (E2M1) values with a shared scale per small block",
}
# GGUF tensor names (llama.cpp's gguf-py tensor_mapping), by role; blk.N. stripped first.
_ROLES = [("embeddings", r"^token_embd$|^tok_embd"), ("output", r"^output$"), ("norm", r"norm"),
          ("attn_qkv", r"^attn_qkv$"), ("attn_q", r"^attn_q(_a|_b)?$"), ("attn_k", r"^attn_k(_b)?$"),
          ("attn_v", r"^attn_v(_b)?$"), ("attn_kv", r"^attn_kv"), ("attn_o", r"^attn_output$"),
          ("router", r"^ffn_gate_inp"), ("ffn_gate", r"^ffn_gate"), ("ffn_up", r"^ffn_up"),
          ("ffn_down", r"^ffn_down")]
_LAYER = re.compile(r"^blk\.(\d+)\.")
_SHOWN = ("general.architecture", "general.name", "general.file_type", "general.quantization_version",
          "general.size_label", "quantize.imatrix.file", "quantize.imatrix.dataset",
          "quantize.imatrix.entries_count", "quantize.imatrix.chunks_count", "tokenizer.ggml.model")


def _role(name: str) -> tuple[str, int | None]:
    m = _LAYER.match(name)
    base = re.sub(r"\.(weight|bias|scale)$", "", name[m.end():] if m else name)
    role = next((r for r, p in _ROLES if re.search(p, base)), "other")
    return role, int(m.group(1)) if m else None


def _file_type(meta: dict) -> str | None:
    value = meta.get("general.file_type")
    if not isinstance(value, int):
        return None
    import gguf

    try:
        return gguf.LlamaFileType(value).name.removeprefix("MOSTLY_")
    except ValueError:
        return f"file type {value}"


def _recipe(formats: dict[str, int], file_type: str | None, imatrix: bool) -> str:
    by_family: dict[str, list[tuple[str, int]]] = {}
    for fmt, n in sorted(formats.items(), key=lambda kv: -kv[1]):
        by_family.setdefault(_FAMILY.get(fmt, "unknown"), []).append((fmt, n))
    total = sum(formats.values()) or 1
    quant = {f: v for f, v in by_family.items() if f != "float"}
    head = f"llama.cpp file type {file_type}" if file_type else "no file type recorded"
    if not quant:
        main = next(iter(formats), "none")
        return f"none: unquantized {main} ({head})"
    parts = []
    for family, types in sorted(quant.items(), key=lambda kv: -sum(n for _, n in kv[1])):
        share = sum(n for _, n in types) / total
        names = ", ".join(t for t, _ in types)
        how = _HOW.get(family, "")
        if family == "legacy block quant" and any(t.endswith("_1") for t, _ in types):
            how += " and a minimum (the _1 types)"
        parts.append(f"{family} {names} ({_share(share)} of weights" + (f": {how})" if how else ")"))
    floats = by_family.get("float")
    if floats:
        parts.append("float " + ", ".join(t for t, _ in floats) + f" ({_share(sum(n for _, n in floats) / total)})")
    return f"{head}: " + "; ".join(parts) + ("; quantized with an importance matrix" if imatrix else "")


def _share(x: float) -> str:
    return "<1%" if 0 < x < 0.005 else f"{x:.0%}"


def _calibration(meta: dict) -> str:
    keys = {k.removeprefix("quantize.imatrix."): v for k, v in meta.items() if k.startswith("quantize.imatrix.")}
    if not keys:
        return "no imatrix recorded (no quantize.imatrix.* keys)"
    bits = [f"imatrix {keys['file']}" if "file" in keys else "imatrix"]
    if "dataset" in keys:
        bits.append(f"dataset {keys['dataset']}")
    if "chunks_count" in keys:
        bits.append(f"{keys['chunks_count']} chunks")
    if "entries_count" in keys:
        bits.append(f"{keys['entries_count']} tensors")
    return "present: " + ", ".join(str(b) for b in bits)


def inspect_gguf(path: Path) -> Inspection:
    """Raises GGUFError in one line."""
    header: GGUFHeader = read(path)
    if not header.tensors:
        raise GGUFError(f"{path}: the header lists no tensors")
    tally = RoleTally()
    for t in header.tensors:
        role, layer = _role(t.name)
        tally.add(role, t.type, t.elements, t.nbytes, layer)
    rows = tally.rows()
    params, nbytes = sum(r.params for r in rows), sum(r.bytes for r in rows)
    file_type = _file_type(header.metadata)
    imatrix = any(k.startswith("quantize.imatrix.") for k in header.metadata)
    shown = {k: str(header.metadata[k]) for k in _SHOWN if k in header.metadata}
    if file_type:
        shown["general.file_type"] = f"{header.metadata['general.file_type']} ({file_type})"
    claimed = name_bpw(path.name)
    if claimed is None and file_type:
        claimed = name_bpw(file_type)
    return Inspection(path=str(path), container=f"GGUF v{header.version}, {len(header.metadata)} metadata keys",
                      files=1, metadata=shown, recipe=_recipe(dict(tally.formats), file_type, imatrix),
                      formats=dict(tally.formats), roles=rows, pattern=pattern(rows), params=params, bytes=nbytes,
                      bpw=8 * nbytes / params if params else 0.0, name_bpw=claimed, calibration=_calibration(
                          header.metadata))


__all__ = ["GGUFError", "inspect_gguf"]


def structure_gguf(path: Path):
    """The model's structure (layers, heads, KV heads, experts) from a GGUF file's `{arch}.*` keys,
    as the diagnosis reads a config.json's. llama.cpp caches K and V in F16 unless told otherwise
    (--cache-type-k/-v), so that is the dtype its KV bytes per token are counted in."""

    meta = read(path).metadata
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        raise ModelConfigError(f"{path}: no general.architecture key")

    def key(name: str):
        v = meta.get(f"{arch}.{name}")
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    heads = key("attention.head_count")
    cfg = {"model_type": arch, "num_hidden_layers": key("block_count"), "hidden_size": key("embedding_length"),
           "num_attention_heads": heads, "num_key_value_heads": key("attention.head_count_kv") or heads,
           "head_dim": key("attention.key_length"), "kv_lora_rank": key("attention.kv_lora_rank"),
           "num_experts": key("expert_count"), "num_experts_per_tok": key("expert_used_count"),
           "n_shared_experts": key("expert_shared_count"), "max_position_embeddings": key("context_length"),
           "dtype": "float16"}
    return parse({k: v for k, v in cfg.items() if v is not None}, f"{path} (GGUF metadata)")
