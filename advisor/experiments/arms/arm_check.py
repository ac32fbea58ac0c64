"""Arms that differ only in the knob, for arms the advisor did not start (the endpoints launcher).

Two running engines are compared by what each reveals about itself: its version, the models it
serves and their context length (`/version`, `/v1/models`), and its configuration info metrics
(vLLM's `cache_config_info`). A difference in anything but the named knob makes the verdict a
verdict on two changes, so the experiment is refused, listing them; so is a named knob that the
engines reveal and that does not differ (an A/A run under a label). A knob the engines do not
reveal (vLLM says nothing of max_num_seqs) cannot be confirmed: the run goes ahead with a note.
"""

from __future__ import annotations

from typing import NamedTuple

from advisor import knobs
from advisor.experiments.arms.protocol import LaunchError
from advisor.experiments.arms.engine_state import EngineState

# Values the engine derives from the memory it found at start (blocks, bytes, tokens, the
# concurrency they allow) or from another key: two identical configurations on two devices can
# differ in them, and a knob that changes them also changes its own key.
DERIVED = {"engine", "num_gpu_blocks", "num_cpu_blocks", "kv_cache_memory_bytes", "kv_cache_size_tokens",
           "kv_cache_max_concurrency", "effective_attention_block_size", "_block_size_resolved"}
# A model swap is how the quantization check is tested with endpoints.
MODEL_MECHANISMS = {"quantization"}


class Differences(NamedTuple):
    other: list[str]  # differences in anything but the knob
    own: str | None  # the knob's own difference
    unconfirmed: list[str]  # what one arm reveals and the other does not


def differences(base: EngineState, cand: EngineState, mechanism: str | None) -> Differences:
    """How two arms differ, by what each reveals about itself."""
    knob_key = knobs.KNOBS[mechanism].config_key if mechanism in knobs.KNOBS else None
    other: list[str] = []
    own: str | None = None
    unconfirmed: list[str] = []

    def differ(what: str, a, b) -> None:
        nonlocal own
        if a == b:
            return
        if a in (None, "") or b in (None, ""):  # one /version failed, an older engine lacks a label
            unconfirmed.append(what)
            return
        text = f"{what} {a} vs {b}"
        if what == knob_key or (what == "models" and mechanism in MODEL_MECHANISMS):
            own = text
        else:
            other.append(text)

    differ("version", base.version, cand.version)
    differ("models", ", ".join(base.models) or None, ", ".join(cand.models) or None)
    differ("max_model_len", base.max_model_len, cand.max_model_len)
    for key in sorted((set(base.config) | set(cand.config)) - DERIVED):
        differ(key, base.config.get(key), cand.config.get(key))
    return Differences(other, own, unconfirmed)


def check(base: EngineState, cand: EngineState, mechanism: str, aa: bool = False, what: str = "endpoints") -> str | None:
    """A note when the knob (or part of the configuration) cannot be confirmed; raises LaunchError
    when the arms are unlike. what: how the messages name the two arms."""
    if base.problem or cand.problem:
        arm, why = ("baseline", base.problem) if base.problem else ("candidate", cand.problem)
        return f"cannot compare the arms' configurations: the {arm} revealed nothing ({why})"
    other, own, unconfirmed = differences(base, cand, None if aa else mechanism)
    partly = (f"; {', '.join(unconfirmed)} revealed by one arm only, so not compared" if unconfirmed else "")
    if aa:
        if other:
            raise LaunchError(f"an A/A run needs two identical arms; the {what} differ in " + "; ".join(other))
        return partly[2:] or None
    if other:
        raise LaunchError(f"the {what} differ in more than {mechanism}: " + "; ".join(other)
                          + (f" (and {own})" if own else "") + ". A verdict would be on all of these at once")
    knob = knobs.KNOBS.get(mechanism)
    key = knob.config_key if knob else None
    revealed = key is not None and key in base.config and key in cand.config
    if mechanism in MODEL_MECHANISMS:
        revealed = bool(base.models and cand.models)
    if revealed and own is None:
        shown = f"{key}={base.config[key]}" if key else f"models {', '.join(base.models)}"
        raise LaunchError(f"both {what} run {shown}: the candidate does not change {mechanism}, so there is "
                          "nothing to test (an A/A run is advisor experiment --aa)")
    if not revealed:
        return (f"the engines do not reveal {mechanism}: that the candidate changes it, and only it, is taken on "
                "trust; everything they do reveal is the same on both arms" + partly)
    return partly[2:] or None


def changed_mechanisms(base: EngineState, cand: EngineState) -> set[str]:
    """The catalog knobs whose revealed value differs between the arms."""
    found = set()
    for name, knob in knobs.KNOBS.items():
        if knob.config_key and base.config.get(knob.config_key) != cand.config.get(knob.config_key):
            found.add(name)
    if base.models and cand.models and base.models != cand.models:
        found |= MODEL_MECHANISMS
    return found
