"""The candidate follows the check: from the baseline's effective value of a knob (its argv, what the
engine reveals, else the engine's own default for its version, as catalog data) and the direction a
check prescribes (up, down, on, off), the value an experiment tries; and the refusal when that value
is what the baseline already runs.

    effective(knob, "vllm", None, {}, "0.32.0")  -> Current(True, "in vLLM 0.32.0 (V1 engine ...)") for chunked_prefill
    candidate(knob, "down", Current(8, ...))      -> 2 for max_num_seqs (divide by 4)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from advisor.knobs.model import DIRECTIONS, EngineDefault, Knob, KnobError
from advisor.knobs.values import show, validate


@dataclass(frozen=True)
class Current:
    """The baseline's effective value of one knob and where that was read (None, known False: unknown)."""
    value: Any
    known: bool
    where: str


def version_tuple(text: str | None) -> tuple[int, ...] | None:
    """"0.32.0", "0.8.5.post1", "v0.11.0rc1+cpu" -> (0, 32, 0), (0, 8, 5), (0, 11, 0); None when no number."""
    if not text:
        return None
    m = re.match(r"v?(\d+(?:\.\d+)*)", str(text).strip())
    return tuple(int(x) for x in m.group(1).split(".")[:3]) if m else None


def engine_default(knob: Knob, engine: str, version: str | None, platform: str | None = None) -> EngineDefault | None:
    """The catalog's default of the knob on this engine, version and platform (vLLM's CPU build has its
    own); known False when it depends on something the catalog cannot tell (the device, an unknown
    version). None: the catalog has no entry."""
    everywhere = tuple(e for e in knob.engine_defaults.get(engine, ()) if e.platform is None)
    mine = tuple(e for e in knob.engine_defaults.get(engine, ()) if platform is not None and e.platform == platform)
    entries = mine or everywhere
    if not entries:
        return None
    v = version_tuple(version)
    if v is None:
        values = {repr(e.value) for e in entries}
        if len(entries) == 1 or (len(values) == 1 and all(e.known for e in entries)):
            return entries[-1]
        return EngineDefault(known=False, note="it depends on the engine's version, which it did not reveal")
    best: EngineDefault | None = None
    for e in entries:
        since = version_tuple(e.since) if e.since else ()
        if since is not None and since <= v and (best is None or since >= (version_tuple(best.since) or ())):
            best = e
    return best


def _engine_name(engine: str, engines: dict[str, dict]) -> str:
    return str(engines.get(engine, {}).get("name") or engine)


def effective(knob: Knob, engine: str, args_value: Any, config: dict[str, str], version: str | None,
              engines: dict[str, dict] | None = None, argv_known: bool = True, platform: str | None = None) -> Current:
    """The knob's value on the baseline: set in its argv, else revealed by the engine
    (vllm:cache_config_info), else the engine's default for its version (catalog engine_defaults).
    argv_known False (an endpoint the advisor did not start): only what the engine reveals counts."""
    if args_value is not None:
        try:
            return Current(validate(knob, args_value), True, "in the baseline's argv")
        except KnobError:
            return Current(args_value, True, "in the baseline's argv")
    if knob.config_key and config.get(knob.config_key) not in (None, ""):
        text = str(config[knob.config_key])
        try:
            return Current(validate(knob, text), True, f"on the baseline ({knob.config_key}={text} in its cache_config_info)")
        except KnobError:
            pass
    name = _engine_name(engine, engines or {})
    if not argv_known:
        return Current(None, False, "the baseline's flags are not known to the advisor (endpoints launcher)")
    d = engine_default(knob, engine, version, platform)
    on = (f"{name} {version}" if version else name) + (f" ({platform} build)" if platform and d and d.platform else "")
    if d is None:
        return Current(None, False, f"the catalog has no default of it for {name}")
    if not d.known:
        return Current(None, False, f"{on}: {d.note}" if d.note else f"{on} picks it itself")
    return Current(validate(knob, d.value), True, f"in {on}" + (f" ({d.note})" if d.note else ""))


def shown(knob: Knob, value: Any) -> str:
    if knob.value.type == "bool" and isinstance(value, bool):
        return "on" if value else "off"
    return show(value)


def no_candidate(knob: Knob) -> str | None:
    """Why the knob has no automatic candidate (catalog candidate.none), or None."""
    return knob.candidate.none


def direction_for(knob: Knob, direction: str | None) -> str:
    """The check's direction, or the knob's default direction (advisor experiment without a check)."""
    if direction is None:
        direction = knob.candidate.default
    if direction not in DIRECTIONS:
        raise KnobError(f"{knob.name}: unknown direction {direction!r} (known: {', '.join(DIRECTIONS)})")
    if direction not in knob.candidate.rules:
        raise KnobError(f"{knob.name}: no automatic candidate for direction {direction!r} "
                        f"(the catalog has: {', '.join(knob.candidate.rules) or 'none'}); give --value")
    return direction


def candidate(knob: Knob, direction: str, current: Current) -> Any:
    """The value the direction prescribes from the current one, clamped to the knob's range."""
    op, x = next(iter(knob.candidate.rules[direction].items()))
    if op == "value":
        return validate(knob, x)
    if not current.known or isinstance(current.value, bool) or not isinstance(current.value, (int, float)):
        raise KnobError(f"{knob.name}: the baseline's argv does not set it and its value is not known "
                        f"({current.where}): give --value, or set it in the deployment's args")
    c = current.value
    new = c * x if op == "times" else c / x if op == "divide" else c + x
    lo, hi = knob.value.min, knob.value.max
    if knob.value.type == "int":
        new = int(new) if op == "divide" else int(round(new))
    else:
        new = round(float(new), 4)
    return validate(knob, min(max(new, lo), hi))
