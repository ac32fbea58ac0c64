"""From a validated value to argv elements and environment, per engine; and back from a baseline argv.

render() validates first, then renders; apply() takes every spelling of the knob out of the baseline
argv (with its value) and appends the candidate's flags, leaving everything else in order. Values
become single argv elements: nothing is ever joined into, or split from, a command line.
"""

from __future__ import annotations

import json
import re
from typing import Any

from advisor.knobs import argv
from advisor.knobs.loader import value_key
from advisor.knobs.model import EngineSpec, Knob, KnobError, Rendered
from advisor.knobs.values import engine_text, show, validate

_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kmgtKMGT])")


class Catalog:
    """The loaded knobs and engine metadata; the module-level functions use one instance."""

    def __init__(self, knobs: dict[str, Knob], engines: dict[str, dict]):
        self.knobs = knobs
        self.engines = engines

    # -- lookups ------------------------------------------------------------------------------

    def knob(self, mechanism: str) -> Knob:
        if mechanism not in self.knobs:
            raise KnobError(f"unknown mechanism {mechanism!r} (known: {', '.join(self.knobs)})")
        return self.knobs[mechanism]

    def spec(self, mechanism: str, engine: str) -> tuple[Knob, EngineSpec]:
        knob = self.knob(mechanism)
        return knob, knob.engine(engine)

    def _underscores(self, engine: str) -> bool:
        return bool(self.engines.get(engine, {}).get("underscores", False))

    # -- render -------------------------------------------------------------------------------

    def render(self, mechanism: str, engine: str, value: Any) -> Rendered:
        knob, spec = self.spec(mechanism, engine)
        v = validate(knob, value)
        if not spec.supported:
            raise KnobError(f"{mechanism} is not supported on {engine}: {spec.reason}")
        if spec.kind == "deployment":
            return Rendered([], {}, replicas=int(v))
        if spec.kind == "flag":
            text = _mapped(knob, spec, spec.values, v, engine)
            return Rendered([] if text is None else [x for f in spec.flags for x in (f, text)], {})
        if spec.kind == "env":
            text = _mapped(knob, spec, spec.values, v, engine)
            return Rendered([], {} if text is None else {spec.env_name: text})
        if spec.kind == "renders":
            key = value_key(v)
            if key not in spec.renders:
                raise KnobError(f"{mechanism}: {show(v)} is not available on {engine} "
                                f"(available there: {', '.join(spec.renders)})")
            r = spec.renders[key]
            return Rendered(list(r.args), dict(r.env))
        if spec.kind == "json":
            if v == "off":
                return Rendered([], {})
            return Rendered([spec.json_flag, json.dumps(v, sort_keys=True, separators=(",", ":"))], {})
        return self._render_fields(knob, spec, v, engine)

    def _render_fields(self, knob: Knob, spec: EngineSpec, v: Any, engine: str) -> Rendered:
        if v == "off":
            return Rendered([], {})
        unknown = [k for k in v if k not in spec.fields]
        if unknown:
            raise KnobError(f"{knob.name}: {', '.join(unknown)} has no {engine} equivalent "
                            f"({engine} takes: {', '.join(spec.fields)})")
        args: list[str] = []
        for key, field in spec.fields.items():  # catalog order: a stable argv
            if key not in v or v[key] is None:
                continue
            x = v[key]
            if field.values is not None:
                if value_key(x) not in field.values:
                    raise KnobError(f"{knob.name}: {key} {show(x)} is not available on {engine} "
                                    f"(available there: {', '.join(field.values)})")
                text = field.values[value_key(x)]
            else:
                text = engine_text(knob, x)
            if text is not None and field.flag is not None:
                args += [field.flag, text]
        return Rendered(args, {})

    # -- apply --------------------------------------------------------------------------------

    def _occurrences(self, spec: EngineSpec, args: list[str], engine: str) -> list[argv.Occurrence]:
        dotted = (spec.json_flag,) if spec.kind == "json" and spec.dotted else ()
        return argv.find(args, spec.replaces, spec.replaces_switches,
                         underscores=self._underscores(engine), dotted=dotted)

    def apply(self, base_args: list[str], mechanism: str, engine: str, value: Any) -> tuple[list[str], dict[str, str]]:
        args = _argv_list(base_args)
        rendered = self.render(mechanism, engine, value)
        _, spec = self.spec(mechanism, engine)
        kept = argv.remove(args, self._occurrences(spec, args, engine))
        return kept + rendered.args, dict(rendered.env)

    # -- current value ------------------------------------------------------------------------

    def current_value(self, base_args: list[str], mechanism: str, engine: str) -> Any:
        args = _argv_list(base_args)
        knob, spec = self.spec(mechanism, engine)
        if spec.kind in ("unsupported", "deployment", "env"):
            return None
        found = self._occurrences(spec, args, engine)
        if not found:
            return None
        if spec.kind == "flag":
            return _read_flag(knob, spec, found)
        if spec.kind == "renders":
            return self._read_renders(knob, spec, found, engine)
        return _read_object(knob, spec, found)

    def _read_renders(self, knob: Knob, spec: EngineSpec, found: list[argv.Occurrence], engine: str) -> Any:
        last = found[-1]
        u = self._underscores(engine)
        default = None
        for key, r in spec.renders.items():
            if not r.args:
                default = key if r.env == () else default
                continue
            own = argv.find(list(r.args), spec.replaces, spec.replaces_switches, underscores=u)
            if any(argv.normalize(o.flag, u) == argv.normalize(last.flag, u) and o.value == last.value for o in own):
                return _typed(knob, key)
        if default is not None:
            return _typed(knob, default)
        return last.value if last.value is not None else last.flag


def _argv_list(base_args: Any) -> list[str]:
    if isinstance(base_args, (str, bytes)) or not isinstance(base_args, (list, tuple)):
        raise KnobError("the baseline must be an argv list, never a shell string")
    if not all(isinstance(a, str) for a in base_args):
        raise KnobError("the baseline argv must hold only text elements")
    return list(base_args)


def _mapped(knob: Knob, spec: EngineSpec, table: dict | None, v: Any, engine: str) -> str | None:
    if table is None:
        return engine_text(knob, v)
    key = value_key(v)
    if key not in table:
        raise KnobError(f"{knob.name}: {show(v)} is not available on {engine} (available there: {', '.join(table)})")
    return table[key]


def _typed(knob: Knob, key: str) -> Any:
    if knob.value.type == "bool":
        return key == "true"
    return key


def _human_int(text: str) -> int | None:
    m = _HUMAN_INT.fullmatch(text.strip())
    if not m:
        return None
    number, suffix = m.groups()
    if suffix.islower():
        return int(float(number) * {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}[suffix])
    if "." in number:
        return None
    return int(number) * {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[suffix]


def _read_flag(knob: Knob, spec: EngineSpec, found: list[argv.Occurrence]) -> Any:
    """The last occurrence that reads as a value of the knob (an option parser's last one wins)."""
    inverse: dict[str, str] = {}
    if spec.values:
        for ours, theirs in spec.values.items():
            if theirs is not None and (theirs not in inverse or ours == theirs):
                inverse[theirs] = ours
    for o in reversed(found):
        if o.value is None:
            continue
        text = inverse.get(o.value, o.value) if spec.values else o.value
        try:
            return validate(knob, text)
        except KnobError:
            if knob.value.type == "int" and (n := _human_int(text)) is not None:
                return n
    last = found[-1]
    return last.value if last.value is not None else last.flag


def _scalar(text: str | None) -> Any:
    if text is None:
        return True
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _key_of(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _read_object(knob: Knob, spec: EngineSpec, found: list[argv.Occurrence]) -> Any:
    """A JSON-object knob as the baseline sets it: the JSON flag, its --flag.key forms, or separate flags."""
    out: dict[str, Any] = {}
    by_flag = {f.flag: (k, f) for k, f in spec.fields.items() if f.flag}
    for o in found:
        if spec.kind == "json" and o.flag == spec.json_flag and o.key is None:
            parsed = _scalar(o.value)
            if not isinstance(parsed, dict):
                return o.value
            out = dict(parsed)
        elif o.key is not None:
            node = out
            *path, leaf = o.key.split(".")
            for p in path:
                node = node.setdefault(p, {})
            node[leaf] = _scalar(o.value)
        elif o.flag in by_flag:
            key, field = by_flag[o.flag]
            value = o.value
            if field.values:
                inverse = {v: k for k, v in field.values.items() if v is not None}
                value = inverse.get(value, value)
            out[key] = _scalar(value) if key != "method" else value
        else:
            out[_key_of(o.flag)] = _scalar(o.value)
    return out or None
