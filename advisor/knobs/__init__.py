"""The knob catalog: the single mechanisms an experiment may change, as data (catalog.yaml) plus a
little code that validates a value, renders it to an engine's flags and environment, applies it to a
baseline argv, reads it back from one, and tells from an engine's revealed configuration whether a
knob is already in its candidate state.

    render("max_num_seqs", "vllm", 8)                  -> Rendered(args=["--max-num-seqs", "8"], env={}, replicas=None)
    apply(base_args, "prefix_caching", "vllm", False)  -> (argv with --no-enable-prefix-caching, {})
    current_value(base_args, "max_num_seqs", "vllm")   -> 2, or None for the engine's default
"""

from __future__ import annotations

from typing import Any

from advisor.knobs import candidates as _candidates
from advisor.knobs import revealed as _revealed
from advisor.knobs.loader import CatalogError, load_catalog
from advisor.knobs.model import (
    CLIENT_METRICS,
    DIRECTIONS,
    ENGINES,
    EngineSpec,
    Knob,
    KnobError,
    Readout,
    Rendered,
    ValueSpec,
)
from advisor.knobs.render import Catalog
from advisor.knobs.values import validate as _validate

_KNOBS, ENGINE_INFO = load_catalog()
KNOBS: dict[str, Knob] = _KNOBS
_CATALOG = Catalog(KNOBS, ENGINE_INFO)


def model_flags(engine: str) -> tuple[str, ...]:
    """The flags that name the model an engine serves (besides vLLM's positional `serve MODEL`)."""
    return tuple(ENGINE_INFO[engine]["model_flags"])


def validate(mechanism: str, value: Any) -> Any:
    """The canonical value of `value` for `mechanism`, or KnobError."""
    return _validate(_CATALOG.knob(mechanism), value)


def render(mechanism: str, engine: str, value: Any) -> Rendered:
    """The argv elements, environment and replica count that `value` becomes on `engine`."""
    return _CATALOG.render(mechanism, engine, value)


def apply(base_args: list[str], mechanism: str, engine: str, value: Any) -> tuple[list[str], dict[str, str]]:
    """(candidate argv, environment to set): the baseline argv without any spelling of the knob's flags,
    with the rendered candidate flags appended; every other argument untouched and in order."""
    return _CATALOG.apply(base_args, mechanism, engine, value)


def current_value(base_args: list[str], mechanism: str, engine: str) -> Any:
    """The value the baseline argv sets for the knob, or None (the engine's default)."""
    return _CATALOG.current_value(base_args, mechanism, engine)


def supported(mechanism: str, engine: str) -> bool:
    return _CATALOG.spec(mechanism, engine)[1].supported


def effective_value(base_args: list[str], mechanism: str, engine: str, config: dict[str, str] | None = None,
                    version: str | None = None, argv_known: bool = True,
                    platform: str | None = None) -> _candidates.Current:
    """The baseline's effective value of the knob: its argv, else what the engine reveals (config),
    else the catalog's default for this engine and version; with where that was read."""
    return _candidates.effective(_CATALOG.knob(mechanism), engine, current_value(base_args, mechanism, engine),
                                 config or {}, version, ENGINE_INFO, argv_known=argv_known, platform=platform)


def default_candidate(mechanism: str, direction: str | None, current: _candidates.Current) -> Any:
    """The automatic candidate in `direction` (None: the knob's default direction) from the current
    value; KnobError naming why there is none (the catalog's reason, or an unknown current value)."""
    knob = _CATALOG.knob(mechanism)
    if knob.candidate.none:
        raise KnobError(f"{mechanism}: no automatic candidate: {knob.candidate.none}")
    return _candidates.candidate(knob, _candidates.direction_for(knob, direction), current)


def already_candidate(mechanism: str, config: dict[str, str]) -> str | None:
    """A sentence when the revealed configuration shows the knob already in its candidate state."""
    return _revealed.already_candidate(KNOBS, mechanism, config)


def already_by_default(mechanism: str, direction: str | None, engine: str | None, version: str | None,
                       config: dict[str, str], shown_as: str | None = None) -> str | None:
    """A sentence when a feature the check would turn on is on by default in this engine and version
    (chunked prefill in vLLM's V1 engine) and the engine does not reveal its value: likely in effect.
    Only features turned on: a switch turned off (drop --enforce-eager) is too often set by hand."""
    knob = KNOBS.get(mechanism)
    if knob is None or knob.value.type != "bool" or direction != "on" or not engine or not version:
        return None
    if knob.config_key and config.get(knob.config_key) not in (None, ""):
        return None  # revealed: already_candidate's to judge
    d = _candidates.engine_default(knob, engine, version)
    if d is None or not d.known or d.value is not True:
        return None
    return (f"{mechanism} is on by default in {shown_as or f'{engine} {version}'} ({d.note or 'the catalog default'}), "
            "unless the deployment's flags turned it off")


__all__ = [
    "CLIENT_METRICS", "CatalogError", "DIRECTIONS", "ENGINES", "ENGINE_INFO", "EngineSpec", "KNOBS", "Knob", "KnobError",
    "Readout", "Rendered", "ValueSpec", "already_by_default", "already_candidate", "apply", "current_value", "default_candidate",
    "effective_value", "model_flags", "render", "supported", "validate",
]
