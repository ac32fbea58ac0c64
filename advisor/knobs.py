"""The mechanism vocabulary: the single knobs an experiment may change, and how to tell from an
engine's revealed configuration whether a knob is already in its candidate state."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Knob:
    name: str
    description: str
    config_key: str | None = None  # where vLLM's cache_config_info reveals the current value
    candidate_when: str | None = None  # the revealed value meaning "already in the candidate state"


KNOBS: dict[str, Knob] = {k.name: k for k in [
    Knob("max_num_seqs", "maximum sequences in one running batch"),
    Knob("max_num_batched_tokens", "token budget of one scheduler step (prefill admission)"),
    Knob("chunked_prefill", "split long prefills into chunks interleaved with decode"),
    Knob("prefix_caching", "reuse KV blocks of shared prompt prefixes", "enable_prefix_caching", "True"),
    Knob("kv_cache_dtype", "KV-cache precision (e.g. fp8)", "cache_dtype", "fp8"),
    Knob("quantization", "weight (and activation) precision"),
    Knob("speculative", "speculative decoding: draft model or n-gram, k tokens"),
    Knob("tensor_parallel", "shard each layer across GPUs"),
    Knob("data_parallel", "independent engine replicas inside one deployment"),
    Knob("replicas", "more (or isolated) serving replicas behind the router"),
    Knob("gpu_memory_utilization", "share of GPU memory the engine may use (KV capacity)", "gpu_memory_utilization"),
    Knob("scheduling_policy", "fcfs or priority scheduling"),
    Knob("enforce_eager", "disable CUDA graphs (eager mode) or enable them"),
]}


def already_candidate(mechanism: str, config: dict[str, str]) -> str | None:
    """A sentence when the revealed configuration shows the knob already in its candidate state."""
    knob = KNOBS[mechanism]
    if not knob.config_key or knob.candidate_when is None:
        return None
    current = config.get(knob.config_key)
    if current is not None and current.lower().startswith(knob.candidate_when.lower()):
        return f"{knob.config_key}={current} already"
    return None
