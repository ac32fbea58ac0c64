"""Config-aware checks: does the engine's revealed configuration already show the candidate state?"""

from __future__ import annotations

from advisor.knobs.model import Knob


def already_candidate(knobs: dict[str, Knob], mechanism: str, config: dict[str, str]) -> str | None:
    """A sentence when the revealed configuration shows the knob already in its candidate state."""
    knob = knobs[mechanism]
    if not knob.config_key or knob.candidate_when is None:
        return None
    current = config.get(knob.config_key)
    if current is not None and current.lower().startswith(knob.candidate_when.lower()):
        return f"{knob.config_key}={current} already"
    return None
