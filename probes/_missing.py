"""Every catalog signal appears in a snapshot: those no source produced get the reason why."""

from __future__ import annotations

from probes.catalog import signal_defs, signal_unit
from probes.snapshot import Signal


def fill(signals: dict[str, Signal], engine: str, gpu_reason: str | None, window_s: float) -> None:
    for name in signal_defs():
        if name in signals:
            continue
        why = (gpu_reason or "no GPU source") if name.startswith("gpu_") else f"{engine} does not export it"
        signals[name] = Signal(name=name, unit=signal_unit(name), window_s=window_s, source="catalog", missing=why)
