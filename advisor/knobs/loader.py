"""Reads catalog.yaml into typed Knob objects; a malformed catalog fails loudly, naming the entry."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from advisor.errors import AdvisorError
from advisor.knobs.model import (
    CANDIDATE_RULES,
    CLIENT_METRICS,
    DIRECTIONS,
    ENGINES,
    PLATFORMS,
    CandidateSpec,
    EngineDefault,
    EngineSpec,
    FieldSpec,
    Knob,
    Readout,
    Rendering,
    ValueSpec,
)
from advisor.resources import read_yaml

CATALOG = Path(__file__).with_name("catalog.yaml")
VALUE_TYPES = ("int", "float", "bool", "choice", "speculative")
KINDS = ("flag", "flags", "renders", "json_flag", "fields", "env", "deployment", "unsupported")


class CatalogError(AdvisorError, ValueError):
    """catalog.yaml is malformed: the message names the knob and the field."""


def value_key(v: Any) -> str:
    """A value as the key of a renders/values table: YAML's true/false become "true"/"false"."""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _need(d: dict, key: str, where: str, kind: type | tuple = str) -> Any:
    if key not in d:
        raise CatalogError(f"{where}: missing required field {key!r}")
    v = d[key]
    if not isinstance(v, kind):
        want = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise CatalogError(f"{where}.{key}: expected {want}, got {type(v).__name__}")
    return v


def _spellings(raw: Any, where: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(s, str) and s.startswith("-") for s in raw):
        raise CatalogError(f"{where}: expected a list of flags")
    return tuple(raw)


def _value(raw: Any, where: str) -> ValueSpec:
    if not isinstance(raw, dict):
        raise CatalogError(f"{where}: expected a mapping")
    t = _need(raw, "type", where)
    if t not in VALUE_TYPES:
        raise CatalogError(f"{where}.type: {t!r} is not one of {', '.join(VALUE_TYPES)}")
    if t in ("int", "float"):
        lo, hi = _need(raw, "min", where, (int, float)), _need(raw, "max", where, (int, float))
        if lo > hi:
            raise CatalogError(f"{where}: min is above max")
        return ValueSpec(t, min=lo, max=hi)
    if t == "choice":
        choices = _need(raw, "choices", where, list)
        if not choices or not all(isinstance(c, str) for c in choices):
            raise CatalogError(f"{where}.choices: expected a list of names")
        return ValueSpec(t, choices=tuple(choices))
    return ValueSpec(t)


def _readout(raw: Any, where: str, signals: set[str] | None) -> Readout:
    if not isinstance(raw, dict):
        raise CatalogError(f"{where}: expected a mapping")
    metric, stat = _need(raw, "metric", where), _need(raw, "statistic", where)
    if metric not in CLIENT_METRICS:
        raise CatalogError(f"{where}.metric: {metric!r} is not a client-side metric ({', '.join(CLIENT_METRICS)})")
    if stat not in CLIENT_METRICS[metric]:
        raise CatalogError(f"{where}.statistic: {metric} offers {', '.join(CLIENT_METRICS[metric])}, not {stat!r}")
    better = _need(raw, "better", where)
    if better not in ("lower", "higher"):
        raise CatalogError(f"{where}.better: 'lower' or 'higher', not {better!r}")
    signal = raw.get("signal")
    if signal is not None and signals is not None and signal not in signals:
        raise CatalogError(f"{where}.signal: unknown signal {signal!r}")
    return Readout(metric, stat, better, signal)


def _rendering(raw: Any, where: str) -> Rendering:
    if isinstance(raw, list):
        raw = {"args": raw}
    if not isinstance(raw, dict) or set(raw) - {"args", "env"}:
        raise CatalogError(f"{where}: expected an argv list or {{args: [...], env: {{...}}}}")
    args = raw.get("args") or []
    env = raw.get("env") or {}
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise CatalogError(f"{where}.args: expected a list of text")
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise CatalogError(f"{where}.env: expected NAME: text pairs")
    return Rendering(tuple(args), tuple(sorted(env.items())))


def _values_table(raw: Any, where: str, allowed: tuple[str, ...] | None) -> dict[str, str | None] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise CatalogError(f"{where}: expected a mapping of value -> engine text (or null)")
    out = {}
    for k, v in raw.items():
        key = value_key(k)
        if allowed is not None and key not in allowed:
            raise CatalogError(f"{where}: {key!r} is not a value of this knob")
        if v is not None and not isinstance(v, str):
            raise CatalogError(f"{where}.{key}: expected text or null")
        out[key] = v
    return out


def _engine(name: str, raw: Any, where: str, knob_value: ValueSpec) -> EngineSpec:
    if not isinstance(raw, dict):
        raise CatalogError(f"{where}: expected a mapping")
    source = _need(raw, "source", where)
    kinds = [k for k in KINDS if k in raw]
    if len(kinds) != 1:
        raise CatalogError(f"{where}: needs exactly one of {', '.join(KINDS)} (has {', '.join(kinds) or 'none'})")
    kind = kinds[0]
    replaces = _spellings(raw.get("replaces"), f"{where}.replaces")
    switches = _spellings(raw.get("replaces_switches"), f"{where}.replaces_switches")
    allowed = knob_value.choices if knob_value.type == "choice" else (
        ("true", "false") if knob_value.type == "bool" else None)
    common = dict(engine=name, source=source, replaces=replaces, replaces_switches=switches)
    if kind == "unsupported":
        return EngineSpec(kind="unsupported", reason=_need(raw, "unsupported", where).strip(), **common)
    if kind == "deployment":
        if raw["deployment"] != "replicas":
            raise CatalogError(f"{where}.deployment: only 'replicas' is known")
        return EngineSpec(kind="deployment", **common)
    if kind in ("flag", "flags"):
        flags = (_need(raw, "flag", where),) if kind == "flag" else _spellings(raw["flags"], f"{where}.flags")
        if not flags or not all(f in replaces for f in flags):
            raise CatalogError(f"{where}: every rendered flag must also be listed in replaces")
        return EngineSpec(kind="flag", flags=flags, values=_values_table(raw.get("values"), f"{where}.values", allowed),
                          **common)
    if kind == "env":
        return EngineSpec(kind="env", env_name=_need(raw, "env", where),
                          values=_values_table(raw.get("values"), f"{where}.values", allowed), **common)
    if kind == "renders":
        table = _need(raw, "renders", where, dict)
        renders = {}
        for k, v in table.items():
            key = value_key(k)
            if allowed is not None and key not in allowed:
                raise CatalogError(f"{where}.renders: {key!r} is not a value of this knob")
            renders[key] = _rendering(v if v is not None else [], f"{where}.renders.{key}")
        if allowed is not None and set(renders) != set(allowed):
            raise CatalogError(f"{where}.renders: needs a rendering for each of {', '.join(allowed)}")
        return EngineSpec(kind="renders", renders=renders, **common)
    if kind == "json_flag":
        flag = _need(raw, "json_flag", where)
        if flag not in replaces:
            raise CatalogError(f"{where}: the JSON flag must also be listed in replaces")
        return EngineSpec(kind="json", json_flag=flag, dotted=bool(raw.get("dotted", False)), **common)
    fields = {}
    for key, spec in _need(raw, "fields", where, dict).items():
        w = f"{where}.fields.{key}"
        if not isinstance(spec, dict) or set(spec) - {"flag", "values"}:
            raise CatalogError(f"{w}: expected {{flag: ..., values: {{...}}}}")
        flag = spec.get("flag")
        if flag is not None and flag not in replaces:
            raise CatalogError(f"{w}: the flag must also be listed in replaces")
        fields[key] = FieldSpec(flag, _values_table(spec.get("values"), f"{w}.values", None))
    return EngineSpec(kind="fields", fields=fields, **common)


def _candidate(raw: Any, where: str, value: ValueSpec) -> CandidateSpec:
    """candidate: {default: DIR, rules: {DIR: {times|divide|plus|value: x}}} or {none: reason, directions: [DIR]}."""
    if not isinstance(raw, dict):
        raise CatalogError(f"{where}: expected a mapping with rules (an automatic candidate) or none (the reason)")
    unknown = set(raw) - {"default", "rules", "none", "directions"}
    if unknown:
        raise CatalogError(f"{where}: unknown field {sorted(unknown)[0]!r}")
    if ("rules" in raw) == ("none" in raw):
        raise CatalogError(f"{where}: needs exactly one of rules (an automatic candidate) and none (why there is none)")
    if "none" in raw:
        reason = _need(raw, "none", where).strip()
        allowed = raw.get("directions") or []
        if not reason or not isinstance(allowed, list) or any(d not in DIRECTIONS for d in allowed):
            raise CatalogError(f"{where}: none needs a reason and directions from {', '.join(DIRECTIONS)}")
        return CandidateSpec(none=re.sub(r"\s+", " ", reason), allowed=tuple(allowed))
    rules_raw = _need(raw, "rules", where, dict)
    rules: dict[str, dict] = {}
    for d, rule in rules_raw.items():
        d = value_key(d) if isinstance(d, bool) else str(d)  # YAML reads on/off as true/false
        d = {"true": "on", "false": "off"}.get(d, d)
        if d not in DIRECTIONS:
            raise CatalogError(f"{where}.rules: unknown direction {d!r} (known: {', '.join(DIRECTIONS)})")
        if not isinstance(rule, dict) or len(rule) != 1 or next(iter(rule)) not in CANDIDATE_RULES:
            raise CatalogError(f"{where}.rules.{d}: expected one of {', '.join(CANDIDATE_RULES)}")
        op, x = next(iter(rule.items()))
        if op != "value" and (isinstance(x, bool) or not isinstance(x, (int, float)) or value.type not in ("int", "float")
                              or (x <= 0 if op != "plus" else x == 0)):
            raise CatalogError(f"{where}.rules.{d}.{op}: a number (times, divide: positive; plus: not 0), "
                               "on a numeric knob")
        rules[d] = {op: x}
    default = raw.get("default")
    default = {True: "on", False: "off"}.get(default, default) if isinstance(default, bool) else default
    if default not in rules:
        raise CatalogError(f"{where}.default: one of the rules' directions ({', '.join(rules)}), not {default!r}")
    return CandidateSpec(default=default, rules=rules)


def _engine_defaults(raw: Any, where: str) -> dict[str, tuple[EngineDefault, ...]]:
    """engine_defaults: {ENGINE: {value: v, since: "0.8.0", platform: cpu, note: text} or a list of them};
    no value: unknown."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or set(raw) - set(ENGINES):
        raise CatalogError(f"{where}: expected a mapping of engines ({', '.join(ENGINES)})")
    out = {}
    for engine, entries in raw.items():
        entries = entries if isinstance(entries, list) else [entries]
        parsed = []
        for i, e in enumerate(entries):
            w = f"{where}.{engine}[{i}]"
            if not isinstance(e, dict) or set(e) - {"value", "since", "note", "platform"}:
                raise CatalogError(f"{w}: expected {{value, since, platform, note}}")
            if e.get("platform") not in (None, *PLATFORMS):
                raise CatalogError(f"{w}.platform: one of {', '.join(PLATFORMS)}")
            if "value" not in e and not e.get("note"):
                raise CatalogError(f"{w}: an unknown default needs a note saying how the engine picks it")
            since = e.get("since")
            if since is not None and not isinstance(since, str):
                raise CatalogError(f"{w}.since: a version as text (quoted)")
            parsed.append(EngineDefault(value=e.get("value"), since=since, note=str(e.get("note") or "").strip(),
                                        known="value" in e, platform=e.get("platform")))
        out[engine] = tuple(parsed)
    return out


def _knob(name: str, raw: Any, signals: set[str] | None) -> Knob:
    where = f"catalog.yaml: knobs.{name}"
    if not isinstance(raw, dict):
        raise CatalogError(f"{where}: expected a mapping")
    description = _need(raw, "description", where).strip()
    fails = _need(raw, "fails_means", where).strip()
    if not description or not fails:
        raise CatalogError(f"{where}: description and fails_means must not be empty")
    value = _value(_need(raw, "value", where, dict), f"{where}.value")
    ro = _need(raw, "readouts", where, dict)
    primary = _readout(_need(ro, "primary", f"{where}.readouts", dict), f"{where}.readouts.primary", signals)
    secondary = tuple(_readout(r, f"{where}.readouts.secondary[{i}]", signals)
                      for i, r in enumerate(ro.get("secondary") or []))
    watch = tuple(raw.get("watch") or [])
    for s in watch:
        if signals is not None and s not in signals:
            raise CatalogError(f"{where}.watch: unknown signal {s!r}")
    numerics = _need(raw, "changes_numerics", where, bool)
    model_file = raw.get("model_file", False)
    if not isinstance(model_file, bool):
        raise CatalogError(f"{where}.model_file: true or false")
    revealed = raw.get("revealed") or {}
    if revealed and (not isinstance(revealed, dict) or "key" not in revealed):
        raise CatalogError(f"{where}.revealed: expected {{key: ..., candidate: ...}}")
    engines_raw = _need(raw, "engines", where, dict)
    missing = [e for e in ENGINES if e not in engines_raw]
    unknown = [e for e in engines_raw if e not in ENGINES]
    if missing or unknown:
        raise CatalogError(f"{where}.engines: needs exactly {', '.join(ENGINES)} "
                           f"(missing: {', '.join(missing) or '-'}; unknown: {', '.join(unknown) or '-'})")
    engines = {e: _engine(e, engines_raw[e], f"{where}.engines.{e}", value) for e in ENGINES}
    if "candidate" not in raw:
        raise CatalogError(f"{where}: missing required field 'candidate' (an automatic candidate, or why there is none)")
    cand = _candidate(raw["candidate"], f"{where}.candidate", value)
    defaults = _engine_defaults(raw.get("engine_defaults"), f"{where}.engine_defaults")
    candidate = revealed.get("candidate")
    return Knob(name=name, description=description, config_key=revealed.get("key"),
                candidate_when=None if candidate is None else str(candidate), layer=str(raw.get("layer", "")),
                map_row=raw.get("map_row"), value=value, primary=primary, secondary=secondary, watch=watch,
                fails_means=fails, changes_numerics=numerics, model_file=model_file, engines=engines, candidate=cand,
                engine_defaults=defaults)


def _known_signals() -> set[str] | None:
    try:
        from probes import signal_defs
        return set(signal_defs())
    except Exception:  # noqa: BLE001 - the catalog still loads; tests check the names separately
        return None


def load_catalog(path: Path = CATALOG) -> tuple[dict[str, Knob], dict[str, dict]]:
    """(knobs by name, engine metadata by engine name)."""
    try:
        raw = read_yaml(path)
    except yaml.YAMLError as e:
        raise CatalogError(f"{path.name}: not valid YAML: {e}") from e
    if not isinstance(raw, dict) or not isinstance(raw.get("knobs"), dict) or not isinstance(raw.get("engines"), dict):
        raise CatalogError(f"{path.name}: expected top-level 'engines' and 'knobs' mappings")
    engines = raw["engines"]
    if set(engines) != set(ENGINES):
        raise CatalogError(f"{path.name}: engines must be exactly {', '.join(ENGINES)}")
    for e in ENGINES:
        _spellings(_need(engines[e], "model_flags", f"{path.name}: engines.{e}", list), f"engines.{e}.model_flags")
    signals = _known_signals()
    knobs = {name: _knob(name, k, signals) for name, k in raw["knobs"].items()}
    return knobs, {e: dict(engines[e]) for e in ENGINES}
