"""Collectors that read a live LLM serving deployment into one typed Snapshot.

This package never imports `advisor`.
"""

from probes.catalog import dialects, signal_defs
from probes.engine import probe_engine
from probes.errors import BadExposition, CatalogError, NotAnEngine, ProbeError, TargetUnreachable
from probes.prometheus import probe_prometheus
from probes.snapshot import EngineInfo, GpuDevice, GpuStatus, Replica, Signal, Snapshot

__all__ = [
    "BadExposition", "CatalogError", "EngineInfo", "GpuDevice", "GpuStatus", "NotAnEngine", "ProbeError",
    "Replica", "Signal", "Snapshot", "TargetUnreachable", "dialects", "probe_engine", "probe_prometheus",
    "signal_defs",
]
