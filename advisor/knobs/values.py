"""Value validation: every value is checked against its knob's type before anything renders or runs.

A value comes from YAML, JSON or the command line: an int may arrive as "8", a bool as "true". What
comes out is canonical (int, float, bool, a choice string, a speculative dict or "off"); anything
else raises KnobError naming the knob, the value and what is allowed.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from advisor.knobs.model import Knob, KnobError

_INT_TEXT = re.compile(r"[+-]?\d+")
_FLOAT_TEXT = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_TRUE = {"true", "on", "yes", "1"}
_FALSE = {"false", "off", "no", "0"}
_KEY = re.compile(r"[a-z][a-z0-9_]{0,63}")
_SPEC_OFF = {"off", "none"}
SPEC_METHODS = ("ngram", "ngram_gpu", "suffix", "draft_model", "eagle", "eagle3", "mtp", "medusa",
                "mlp_speculator")
SPEC_TOKENS = (1, 64)
MAX_TEXT = 512


def show(value: Any) -> str:
    """A value as an error message shows it: numbers plain, text quoted, objects as JSON."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (dict, list)):
        try:
            return json.dumps(value, sort_keys=True)
        except (TypeError, ValueError):
            return repr(value)
    return repr(value)


def _refuse(knob: Knob, value: Any, detail: str = "") -> KnobError:
    extra = f"; {detail}" if detail else ""
    return KnobError(f"{knob.name}: {show(value)} is not allowed ({knob.value.allowed()}{extra})")


def validate(knob: Knob, value: Any) -> Any:
    """The canonical value, or KnobError."""
    t = knob.value.type
    if t == "int":
        return _int(knob, value)
    if t == "float":
        return _float(knob, value)
    if t == "bool":
        return _bool(knob, value)
    if t == "choice":
        return _choice(knob, value)
    if t == "speculative":
        return _speculative(knob, value)
    raise KnobError(f"{knob.name}: unknown value type {t!r} in the catalog")


def _int(knob: Knob, value: Any) -> int:
    if isinstance(value, bool):
        raise _refuse(knob, value)
    if isinstance(value, int):
        n = value
    elif isinstance(value, str) and _INT_TEXT.fullmatch(value.strip()):
        n = int(value.strip())
    else:
        raise _refuse(knob, value)
    if not knob.value.min <= n <= knob.value.max:
        raise _refuse(knob, value)
    return n


def _float(knob: Knob, value: Any) -> float:
    if isinstance(value, bool):
        raise _refuse(knob, value)
    if isinstance(value, (int, float)):
        x = float(value)
    elif isinstance(value, str) and _FLOAT_TEXT.fullmatch(value.strip()):
        x = float(value.strip())
    else:
        raise _refuse(knob, value)
    if not math.isfinite(x) or not knob.value.min <= x <= knob.value.max:
        raise _refuse(knob, value)
    return x


def _bool(knob: Knob, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    raise _refuse(knob, value)


def _choice(knob: Knob, value: Any) -> str:
    if isinstance(value, str) and value in knob.value.choices:
        return value
    raise _refuse(knob, value)


def _speculative(knob: Knob, value: Any) -> dict | str:
    """A speculative config: "off", or a JSON object (or its text) vLLM's --speculative-config takes."""
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in _SPEC_OFF:
            return "off"
        try:
            value_obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise _refuse(knob, value, f"not JSON: {e.msg}") from None
        except (ValueError, RecursionError):
            raise _refuse(knob, value, "not JSON this advisor can read (nested too deeply or a number too long)") from None
    else:
        value_obj = value
    if not isinstance(value_obj, dict) or not value_obj:
        raise _refuse(knob, value)
    out: dict[str, Any] = {}
    for k, v in value_obj.items():
        if not isinstance(k, str) or not _KEY.fullmatch(k):
            raise _refuse(knob, value, f"key {show(k)} is not a lower-case name")
        if isinstance(v, str):
            if len(v) > MAX_TEXT or any(ord(c) < 32 or ord(c) == 127 for c in v):
                raise _refuse(knob, value, f"{k} has control characters or is too long")
        elif not (v is None or isinstance(v, (bool, int)) or (isinstance(v, float) and math.isfinite(v))):
            raise _refuse(knob, value, f"{k} must be text, a number, true/false or null")
        out[k] = v
    k = out.get("num_speculative_tokens")
    if isinstance(k, bool) or not isinstance(k, int) or not SPEC_TOKENS[0] <= k <= SPEC_TOKENS[1]:
        raise _refuse(knob, value, "num_speculative_tokens must be an integer from 1 to 64")
    method = out.get("method")
    if method is None and not out.get("model"):
        raise _refuse(knob, value, "give a method or a draft model")
    if method is not None and method not in SPEC_METHODS:
        raise _refuse(knob, value, f"method must be one of {', '.join(SPEC_METHODS)}")
    model = out.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip() or model.startswith("-")):
        raise _refuse(knob, value, "model must be a path or repository id")
    for name in ("prompt_lookup_max", "prompt_lookup_min"):
        n = out.get(name)
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 64):
            raise _refuse(knob, value, f"{name} must be an integer from 1 to 64")
    return out


def engine_text(knob: Knob, value: Any) -> str:
    """The canonical value as argv text (no engine mapping)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)
