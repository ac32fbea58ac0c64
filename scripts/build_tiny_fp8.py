"""Write the tiny model (scripts/build_tiny_model.py, BF16) as an FP8 checkpoint the way vLLM reads
one: every linear layer's weight in float8_e4m3fn with a per-tensor F32 `weight_scale` (amax / 448,
the format's largest normal value), embeddings, norms and lm_head kept in BF16, and config.json's
`quantization_config` {quant_method: fp8, activation_scheme: dynamic} (vLLM's Fp8Config: a
serialized FP8 checkpoint, activations scaled per token at run time). Tokenizer files are copied.
Runs in the engine venv (torch, safetensors).

    build_tiny_fp8.py BF16_DIR OUT_DIR
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
FP8_MAX = torch.finfo(torch.float8_e4m3fn).max  # 448


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("out", type=Path)
    a = ap.parse_args()
    tensors = load_file(str(a.src / "model.safetensors"))
    out: dict[str, torch.Tensor] = {}
    for name, t in tensors.items():
        if name.endswith(".weight") and any(f".{p}." in name for p in LINEAR):
            w = t.float()
            scale = (w.abs().max() / FP8_MAX).clamp(min=1e-12)
            out[name] = (w / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
            out[name.removesuffix(".weight") + ".weight_scale"] = scale.reshape(()).to(torch.float32)
        else:
            out[name] = t
    tmp = a.out.with_name(a.out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for f in a.src.iterdir():
        if f.name not in ("model.safetensors", "config.json") and f.is_file():
            shutil.copy2(f, tmp / f.name)
    config = json.loads((a.src / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file(out, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    shutil.rmtree(a.out, ignore_errors=True)
    tmp.rename(a.out)  # whole or absent: a set-up interrupted midway leaves no half checkpoint


if __name__ == "__main__":
    main()
