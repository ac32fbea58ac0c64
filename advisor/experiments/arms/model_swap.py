"""The quantization knob as a model-file swap: most quantization methods need a checkpoint made for
them, so the candidate is another model file (a GGUF for llama.cpp, a safetensors folder for vLLM)
and the only change to the baseline's argv is the path after its model flag.

Both arms' models are read in the map's four layers before anything starts (a file that is not a
model is refused then, not after the candidate failed to load), and the report carries them: a
quantization verdict without the two recipes beside it says "Q4 was slower" without saying which Q4.

After the run, `explain` says in the map's words why a smaller model did not decode faster:
"dequantization ate the gain" when the resident memory fell and TPOT did not improve.
"""

from __future__ import annotations

import os
from pathlib import Path

from advisor import knobs
from advisor.errors import AdvisorError
from advisor.models import locate
from advisor.models.four_layers import ModelLayers
from advisor.models.inspect import inspect
from advisor.models.locate import weights_path
from advisor.models.structure import ModelConfigError

# A relative change in resident memory smaller than this is the allocator's noise, not the weights.
MEMORY_CHANGE = 0.02
_MODEL_SUFFIXES = (".gguf", ".safetensors")


class ModelSwapError(AdvisorError, ValueError):
    pass


def candidate_path(mechanism: str, value_text: str | None) -> Path | None:
    """The model file or folder a value names, for a knob whose values may be model files; None when
    the value is not a path (a method name). A value that looks like a path but is not there is an
    error, not a method name."""
    knob = knobs.KNOBS.get(mechanism)
    if knob is None or not knob.model_file or not value_text:
        return None
    p = Path(value_text).expanduser()
    if p.exists():
        return p.absolute()
    if "/" in value_text or value_text.endswith(_MODEL_SUFFIXES):
        raise ModelSwapError(f"{mechanism}: {value_text}: no such model file or folder")
    return None


def swap(base_args: list[str], command: list[str], engine: str, path: Path) -> list[str]:
    """The baseline's args with the model path replaced by `path`, and nothing else changed but the
    name the model is served under (kept as it was, so that requests reach it)."""
    flags = knobs.model_flags(engine)
    found = locate.model_position(base_args, flags)
    if found is None:
        where = " (it is in local.command: move it to local.args)" if locate.model_position(command, flags) else ""
        raise ModelSwapError(f"the baseline's args name no model ({' or '.join(flags)}){where}: "
                             "nothing to swap")
    i, model = found
    if _same_file(model, path):
        raise ModelSwapError(f"{path} is the model the baseline already serves: nothing to test")
    out = list(base_args)
    out[i] = out[i].split("=", 1)[0] + "=" + str(path) if "=" in out[i] and out[i].startswith("--") else str(path)
    if engine in ("vllm", "sglang") and "--served-model-name" not in base_args \
            and not any(a.startswith("--served-model-name=") for a in base_args):
        out += ["--served-model-name", model]  # vLLM and SGLang serve a model under its path by default
    return out


def _same_file(a: str, b: Path) -> bool:
    try:
        return os.path.samefile(Path(a).expanduser(), b)
    except OSError:
        return False


def layers(base_args: list[str], engine: str, candidate: Path) -> dict[str, ModelLayers]:
    """Both arms' models in the four layers. The candidate's must read as a model (ModelSwapError in
    one line otherwise); the baseline's is left out when its model is not a file on this host (a hub
    id, a path on another host)."""

    try:
        out = {"candidate": ModelLayers.of(inspect(candidate))}
    except ModelConfigError as e:
        raise ModelSwapError(f"candidate model: {e}") from None
    found = locate.model_position(base_args, knobs.model_flags(engine))
    base = weights_path(found[1]) if found else None
    if base is not None:
        try:
            out = {"baseline": ModelLayers.of(inspect(base)), **out}
        except ModelConfigError:
            pass
    return out


def explain(memory, tpot, fails_means: str) -> str | None:
    """The map's reading of a quantization that did not pay: memory fell, TPOT did not improve.
    memory: the MemoryReadout (the mapped weights where the engine maps them, else its GPU memory,
    else the whole RSS);
    tpot: the judged TPOT MetricResult (or None)."""
    if memory is None or tpot is None or tpot.verdict == "improved":
        return None
    if memory.weights_ratio is not None:
        base, cand, what = memory.baseline_weights_bytes, memory.candidate_weights_bytes, "resident weights"
    elif memory.gpu_ratio is not None:
        base, cand, what = memory.baseline_gpu_bytes, memory.candidate_gpu_bytes, "GPU memory"
    else:
        base, cand, what = memory.baseline_bytes, memory.candidate_bytes, "resident memory"
    if not base or cand is None or cand / base - 1 > -MEMORY_CHANGE:
        return None
    ratio = "-" if tpot.ratio is None else f"{tpot.ratio:.3g}"
    shown = tpot.verdict != "inconclusive"
    return (f"dequantization {'ate' if shown else 'may have eaten'} the gain: {what} fell {1 - cand / base:.0%} "
            f"({base / 2**20:,.1f} -> {cand / 2**20:,.1f} MiB) but TPOT {tpot.statistic} "
            f"{'did not fall' if shown else 'was not shown to fall'} (ratio {ratio}, {tpot.verdict}). " + fails_means)
