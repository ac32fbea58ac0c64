"""A model's weights judged in the map's four layers, from the files alone: the container, the numeric
format of each tensor, the weight-encoding recipe, and the allocation (which roles and layers got
which format), with the actual bits per weight computed from byte sizes and element counts, never
from the name.

Safetensors checkpoints (a folder of *.safetensors with its config.json, or one file) are read
here; GGUF files (one file, or a folder holding one) in gguf_inspect.py; both fill one Inspection
(four_layers.py). Packed integer weights (AWQ, GPTQ, compressed-tensors' pack-quantized) are
counted in logical weights: an I32 element holds 32 / bits of them; their scales, zero points and
group indices count as the weight's own bytes, so a 4-bit group-128 recipe reads a little over 4
bits per weight.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from pathlib import Path

from advisor.models.four_layers import Inspection, RoleRow, RoleTally, name_bpw, pattern
from advisor.models.safetensors import SafetensorsError, Tensor, read_header
from advisor.models.structure import ModelConfigError, declared_quantization
from advisor.models.gguf_file import looks_like_gguf

# Tensor-name suffixes that belong to one quantized weight (its packed values and their side data).
_PARTS = re.compile(r"\.(weight|qweight|weight_packed|scales|qzeros|g_idx|weight_scale|weight_scale_inv|"
                    r"input_scale|weight_zero_point|weight_shape|weight_global_scale|bias)$")
_PACKED = {"qweight", "weight_packed"}
_SIDE = {"scales", "qzeros", "g_idx", "weight_scale", "weight_scale_inv", "input_scale", "weight_zero_point",
         "weight_shape", "weight_global_scale"}
# Role by module name, first match (Hugging Face names; GPT-2 and Falcon spellings too).
_ROLES = [("embeddings", r"embed_tokens|\bwte\b|word_embeddings|tok_embeddings"),
          ("output", r"lm_head|^output$"),
          ("attn_qkv", r"qkv_proj|query_key_value|c_attn"),
          ("attn_q", r"q_proj|q_a_proj|q_b_proj|\bwq\b"), ("attn_k", r"k_proj|\bwk\b"), ("attn_v", r"v_proj|\bwv\b"),
          ("attn_kv", r"kv_a_proj|kv_b_proj"), ("attn_o", r"o_proj|out_proj|attention\.dense|\bwo\b"),
          ("ffn_gate", r"gate_proj|\bw1\b"), ("ffn_up", r"up_proj|\bw3\b|dense_h_to_4h|c_fc"),
          ("ffn_down", r"down_proj|\bw2\b|dense_4h_to_h|c_proj"), ("router", r"\.gate$|router"),
          ("norm", r"norm|\bln_")]
_LAYER = re.compile(r"\b(?:layers|h|blocks|layer)\.(\d+)\.")
_FORMAT = {"BF16": "BF16", "F16": "F16", "F32": "F32", "F64": "F64", "F8_E4M3": "FP8 E4M3", "F8_E5M2": "FP8 E5M2",
           "I8": "INT8", "U8": "UINT8", "F4": "FP4"}


def _files(path: Path) -> tuple[list[Path], Path | None]:
    if path.is_file():
        config = path.parent / "config.json"
        return [path], config if config.exists() else None
    if not path.is_dir():
        raise ModelConfigError(f"{path}: no such file or folder")
    files = sorted(path.glob("*.safetensors"))
    if not files:
        kinds = sorted({p.suffix for p in path.iterdir() if p.is_file()}) or ["nothing"]
        raise ModelConfigError(f"{path}: no *.safetensors files (found {', '.join(kinds)})")
    config = path / "config.json"
    return files, config if config.exists() else None


def _role(module: str) -> str:
    base = re.sub(r"^(model|transformer|language_model)\.", "", module)
    return next((role for role, pattern in _ROLES if re.search(pattern, base)), "other")


def _recipe(q: dict | None, formats: Counter) -> tuple[str, int | None]:
    """(the recipe in words, the bits of a packed integer weight)."""
    if not q:
        main = formats.most_common(1)[0][0] if formats else "unknown"
        return f"none: unquantized {main}", None
    method = str(q.get("quant_method") or q.get("quant_algo") or "unknown").lower()
    bits = q.get("bits") or q.get("w_bit")
    group = q.get("group_size") or q.get("q_group_size")
    if method == "awq":
        return (f"AWQ {bits}-bit, group {group}, zero points {'yes' if q.get('zero_point', True) else 'no'}"
                f"{', version ' + str(q['version']) if q.get('version') else ''}"), int(bits or 4)
    if method == "gptq":
        return (f"GPTQ {bits}-bit, group {group}, {'symmetric' if q.get('sym', True) else 'asymmetric'}, "
                f"act-order {'yes' if q.get('desc_act') else 'no'}"), int(bits or 4)
    if method == "fp8":
        block = q.get("weight_block_size")
        return (f"FP8 weights ({q.get('fmt') or 'e4m3'}), {'block ' + str(block) if block else 'per-tensor'} scales, "
                f"{q.get('activation_scheme', 'dynamic')} activation scales"), None
    if method == "compressed-tensors":
        groups = q.get("config_groups") or {}
        weights = next((g.get("weights") for g in groups.values() if isinstance(g, dict) and g.get("weights")), {}) or {}
        nbits = weights.get("num_bits")
        return (f"compressed-tensors ({q.get('format', 'unknown format')}): {weights.get('type', '?')} {nbits}-bit, "
                f"{weights.get('strategy', '?')} strategy, group {weights.get('group_size')}, "
                f"{'symmetric' if weights.get('symmetric', True) else 'asymmetric'}"), (int(nbits) if nbits else None)
    if method == "modelopt":
        return f"ModelOpt {q.get('quant_algo', '')}".strip(), None
    return f"{method} ({', '.join(f'{k}={v}' for k, v in sorted(q.items()) if not isinstance(v, (dict, list)))})", \
        (int(bits) if bits else None)


def _calibration(q: dict | None, meta: dict[str, str]) -> str:
    q = q or {}
    dataset = q.get("dataset") or q.get("calibration_dataset") or meta.get("calibration_dataset")
    samples = q.get("nsamples") or q.get("num_calibration_samples") or meta.get("num_calibration_samples")
    if dataset:
        return f"present: dataset {dataset}" + (f", {samples} samples" if samples else "")
    if q:
        return "not recorded in quantization_config"
    return "none (not quantized)"


def inspect(path: Path | str) -> Inspection:
    """A safetensors checkpoint (a folder or one file) or a GGUF file. Raises ModelConfigError
    (SafetensorsError, GGUFError for a bad file) in one line."""
    path = Path(path)
    if _is_gguf(path):
        from advisor.models.gguf_inspect import inspect_gguf

        return inspect_gguf(path if path.is_file() else _one_gguf(path))
    files, config_path = _files(path)
    q = declared_quantization(config_path) if config_path is not None else None
    tensors: list[Tensor] = []
    meta: dict[str, str] = {}
    for f in files:
        t, m = read_header(f)
        tensors += t
        meta.update(m)
    if not tensors:
        raise SafetensorsError(f"{path}: the header lists no tensors")
    modules: dict[str, dict[str, Tensor]] = defaultdict(dict)
    for t in tensors:
        m = _PARTS.search(t.name)
        modules[t.name[: m.start()] if m else t.name][m.group(1) if m else "weight"] = t
    dtype_counts = Counter(t.dtype for t in tensors if not _PARTS.search(t.name) or t.name.endswith(".weight"))
    recipe, packed_bits = _recipe(q, Counter({_FORMAT.get(k, k): v for k, v in dtype_counts.items()}))
    tally = RoleTally()
    for module, parts in modules.items():
        packed = next((parts[p] for p in _PACKED if p in parts), None)
        main = packed or parts.get("weight")
        nbytes = sum(t.nbytes for t in parts.values())
        if main is None:  # side data alone (a stray scale): bytes without weights
            params, fmt = 0, "side data"
        elif packed is not None:
            bits = packed_bits or 4
            params, fmt = packed.elements * (32 // bits if packed.dtype == "I32" else 8 // bits), f"INT{bits} (packed)"
        else:
            params, fmt = main.elements, _FORMAT.get(main.dtype, main.dtype)
        params += parts["bias"].elements if "bias" in parts and main is not None and main is not parts["bias"] else 0
        layer = _LAYER.search(module)
        tally.add(_role(module), fmt, params, nbytes, int(layer.group(1)) if layer else None)
    rows = tally.rows()
    params, nbytes = sum(r.params for r in rows), sum(r.bytes for r in rows)
    return Inspection(path=str(path), container="safetensors" + (" + config.json" if config_path else ""),
                      files=len(files), metadata=meta, quantization_config=q, recipe=recipe,
                      formats=dict(tally.formats), roles=rows, pattern=pattern(rows), params=params, bytes=nbytes,
                      bpw=8 * nbytes / params if params else 0.0, name_bpw=name_bpw(path.name),
                      calibration=_calibration(q, meta))




def _is_gguf(path: Path) -> bool:
    if path.is_dir():
        return not any(path.glob("*.safetensors")) and any(path.glob("*.gguf"))
    return path.is_file() and path.suffix.lower() != ".safetensors" and looks_like_gguf(path)


def _one_gguf(folder: Path) -> Path:
    found = sorted(folder.glob("*.gguf"))
    if len(found) > 1:
        names = ", ".join(p.name for p in found[:5]) + (" ..." if len(found) > 5 else "")
        raise ModelConfigError(f"{folder}: {len(found)} GGUF files ({names}); name the one to inspect")
    return found[0]


__all__ = ["Inspection", "RoleRow", "SafetensorsError", "inspect"]
