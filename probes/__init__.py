"""Collectors that read a live LLM serving deployment into one typed Snapshot.

Of `advisor` this package imports only `advisor.errors`, the error root (ARCHITECTURE.md). Its
names are loaded when first used (PEP 562): importing `probes.errors` must not load the HTTP stack
and the probes behind it (httpx and httpcore pull in trio where it is installed: 0.3 s of every
command's start-up, measured with `python -X importtime` of `advisor diagnose --help`).

The modules named with a leading underscore (`_promql`, `_primitives`, ...) are the probes' own:
other packages use the names below and the public modules (`probes.prometheus`, `probes.http`,
`probes.engine`, `probes.gpu`, `probes.watch`, `probes.catalog`, `probes.snapshot`).
"""

from importlib import import_module

_WHERE = {
    "dialects": "probes.catalog", "signal_defs": "probes.catalog",
    "probe_engine": "probes.engine", "probe_prometheus": "probes.prometheus",
    "BadExposition": "probes.errors", "DialectError": "probes.errors", "NotAnEngine": "probes.errors",
    "ProbeError": "probes.errors", "TargetUnreachable": "probes.errors",
    "EngineInfo": "probes.snapshot", "GpuDevice": "probes.snapshot", "GpuStatus": "probes.snapshot",
    "Replica": "probes.snapshot", "Signal": "probes.snapshot", "Snapshot": "probes.snapshot",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'probes' has no attribute {name!r}")
    value = getattr(import_module(_WHERE[name]), name)
    globals()[name] = value
    return value
