"""GPU telemetry read locally through NVML (nvidia-ml-py), per device and summarised.

Every reading is best effort: one NVML call that fails becomes that signal's missing reason,
never an exception, and a machine without a driver yields GpuStatus(available=False).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from probes.catalog import signal_unit
from probes.snapshot import GpuDevice, GpuStatus, Signal

MIB = 1024 * 1024
# NVML's "KB" in PCIe and NVLink readings is KiB (nvml.h: throughput "in KB/s", NVLink "in KiB").
KIB = 1024
NVLINK_ALL_LINKS = 0xFFFFFFFF  # scopeId that asks NVML for the sum over every link
NO_DCGM = "needs DCGM profiling metrics (dcgm-exporter via Prometheus)"

# Per-device signals and their units.
DEVICE_SIGNALS = {
    "gpu_util": "percent", "gpu_memory_used": "MiB", "gpu_memory_total": "MiB", "gpu_memory_used_frac": "ratio",
    "gpu_power": "W", "gpu_sm_clock": "MHz", "gpu_mem_clock": "MHz", "gpu_pcie_tx": "B/s", "gpu_pcie_rx": "B/s",
    "gpu_nvlink_tx": "B/s", "gpu_nvlink_rx": "B/s", "gpu_process_count": "processes",
}

# Signals summarize() reports, in the units signals.yaml gives them (checked by the tests).
SUMMARY_SIGNALS = (
    "gpu_util_avg", "gpu_memory_used_frac", "gpu_power_avg", "gpu_pcie_tx_avg", "gpu_pcie_rx_avg",
    "gpu_nvlink_tx_avg", "gpu_nvlink_rx_avg", "gpu_sm_active_avg", "gpu_tensor_active_avg",
    "gpu_dram_active_avg",
)


def _load_nvml() -> tuple[Any, str | None]:
    try:
        import pynvml
    except ImportError as e:  # the package is a dependency, but a broken install must not crash a probe
        return None, f"nvidia-ml-py is not importable ({e}): GPU signals unavailable"
    return pynvml, None


def _reason(nvml: Any, err: Exception) -> str:
    code = getattr(err, "value", None)
    if code == getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3):
        return "not supported on this device"
    if code == getattr(nvml, "NVML_ERROR_NO_PERMISSION", 4):
        return "no permission to read it (NVML)"
    return f"NVML error: {err}"


def _init_reason(nvml: Any, err: Exception) -> str:
    code = getattr(err, "value", None)
    if code == getattr(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND", 12):
        return "no NVIDIA driver (libnvidia-ml not found): GPU signals unavailable"
    if code == getattr(nvml, "NVML_ERROR_DRIVER_NOT_LOADED", 9):
        return "no NVIDIA driver loaded: GPU signals unavailable"
    return f"NVML could not start ({err}): GPU signals unavailable"


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class _Reader:
    """Reads one device; each signal is either a value or the reason NVML gave none."""

    def __init__(self, nvml: Any, handle: Any):
        self.nvml, self.handle = nvml, handle
        self.signals: dict[str, Signal] = {}

    def call(self, fn: str, *args: Any) -> tuple[Any, str | None]:
        try:
            return getattr(self.nvml, fn)(self.handle, *args), None
        except self.nvml.NVMLError as e:
            return None, _reason(self.nvml, e)

    def put(self, name: str, value: float | None, unit: str, fn: str, missing: str | None = None,
            note: str | None = None) -> None:
        self.signals[name] = Signal(name=name, value=value, unit=unit, source=f"nvml:{fn}",
                                    missing=None if value is not None else (missing or "no value"), note=note)

    def read(self) -> None:
        util, why = self.call("nvmlDeviceGetUtilizationRates")
        self.put("gpu_util", None if util is None else float(util.gpu), "percent",
                 "nvmlDeviceGetUtilizationRates", why)

        mem, why = self.call("nvmlDeviceGetMemoryInfo")
        fn = "nvmlDeviceGetMemoryInfo"
        self.put("gpu_memory_used", None if mem is None else mem.used / MIB, "MiB", fn, why)
        self.put("gpu_memory_total", None if mem is None else mem.total / MIB, "MiB", fn, why)
        frac = mem.used / mem.total if mem is not None and mem.total else None
        self.put("gpu_memory_used_frac", frac, "ratio", fn, why or "device reports no memory")

        mw, why = self.call("nvmlDeviceGetPowerUsage")
        self.put("gpu_power", None if mw is None else mw / 1000.0, "W", "nvmlDeviceGetPowerUsage", why)

        for name, clock in (("gpu_sm_clock", "NVML_CLOCK_SM"), ("gpu_mem_clock", "NVML_CLOCK_MEM")):
            mhz, why = self.call("nvmlDeviceGetClockInfo", getattr(self.nvml, clock))
            self.put(name, None if mhz is None else float(mhz), "MHz", "nvmlDeviceGetClockInfo", why)

        for name, counter in (("gpu_pcie_tx", "NVML_PCIE_UTIL_TX_BYTES"), ("gpu_pcie_rx", "NVML_PCIE_UTIL_RX_BYTES")):
            kbs, why = self.call("nvmlDeviceGetPcieThroughput", getattr(self.nvml, counter))
            self.put(name, None if kbs is None else float(kbs) * KIB, "B/s", "nvmlDeviceGetPcieThroughput", why,
                     note="NVML samples PCIe throughput over about 20 ms")
        self._processes()

    def _processes(self) -> None:
        procs, why = self.call("nvmlDeviceGetComputeRunningProcesses")
        fn = "nvmlDeviceGetComputeRunningProcesses"
        if procs is None:
            self.put("gpu_process_count", None, "processes", fn, why)
            return
        parts = [f"{p.pid}:{'?' if p.usedGpuMemory is None else round(p.usedGpuMemory / MIB)}" for p in procs]
        self.put("gpu_process_count", float(len(procs)), "processes", fn,
                 note=("pid:MiB " + " ".join(parts)) if parts else None)


# NVML field values carry their type; the union member to read follows from it.
_VALUE_MEMBER = {
    "NVML_VALUE_TYPE_DOUBLE": "dVal", "NVML_VALUE_TYPE_UNSIGNED_INT": "uiVal",
    "NVML_VALUE_TYPE_UNSIGNED_LONG": "ulVal", "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG": "ullVal",
    "NVML_VALUE_TYPE_SIGNED_LONG_LONG": "sllVal", "NVML_VALUE_TYPE_SIGNED_INT": "siVal",
    "NVML_VALUE_TYPE_UNSIGNED_SHORT": "usVal",
}


def _field(nvml: Any, fv: Any) -> float:
    members = {getattr(nvml, k): m for k, m in _VALUE_MEMBER.items() if hasattr(nvml, k)}
    return float(getattr(fv.value, members.get(fv.valueType, "ullVal")))


def _nvlink_sample(nvml: Any, handle: Any) -> tuple[dict[str, tuple[float, float]], dict[str, str]]:
    """Cumulative NVLink data counters (KiB, summed over links) with their NVML timestamps (us)."""
    names = ("gpu_nvlink_tx", "gpu_nvlink_rx")
    try:
        ids = (nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX)
        values = nvml.nvmlDeviceGetFieldValues(handle, [(f, NVLINK_ALL_LINKS) for f in ids])
    except nvml.NVMLError as e:
        return {}, dict.fromkeys(names, _reason(nvml, e))
    except AttributeError:  # a library too old to know the NVLink throughput fields
        return {}, dict.fromkeys(names, "this NVML has no NVLink throughput fields")
    got, why = {}, {}
    for name, fv in zip(names, values):
        if fv.nvmlReturn != getattr(nvml, "NVML_SUCCESS", 0):
            why[name] = _reason(nvml, nvml.NVMLError(fv.nvmlReturn))
        else:
            got[name] = (_field(nvml, fv), float(fv.timestamp))
    return got, why


def _nvlink_rates(reader: _Reader, first: tuple[dict, dict], second: tuple[dict, dict], elapsed: float) -> None:
    (a, why_a), (b, why_b) = first, second
    for name in ("gpu_nvlink_tx", "gpu_nvlink_rx"):
        why = why_a.get(name) or why_b.get(name)
        if why or name not in a or name not in b:
            reader.put(name, None, "B/s", "nvmlDeviceGetFieldValues", why or "NVLink counter not read")
            continue
        (k0, t0), (k1, t1) = a[name], b[name]
        # NVML stamps each reading; an unchanged stamp means a cached value, whose rate is unknown.
        dt = (t1 - t0) / 1e6 if t0 > 0 and t1 > 0 else elapsed
        if dt <= 0 or k1 < k0:
            reader.put(name, None, "B/s", "nvmlDeviceGetFieldValues",
                       f"NVLink counter not refreshed (or reset) within {elapsed:.2g} s")
            continue
        reader.put(name, (k1 - k0) * KIB / dt, "B/s", "nvmlDeviceGetFieldValues",
                   note=f"rate of the cumulative counter over {dt:.3g} s, all links")


def read_gpus(nvml: ModuleType | Any = None, nvlink_sample_s: float = 0.2,
              sleep: Callable[[float], None] = time.sleep) -> GpuStatus:
    """Every NVIDIA device on this machine, read through NVML. Never raises for NVML errors.

    NVLink throughput is a cumulative counter, so it is sampled twice, nvlink_sample_s apart.
    """
    if nvml is None:
        nvml, why = _load_nvml()
        if nvml is None:
            return GpuStatus(available=False, source="nvml", reason=why, devices=[])
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as e:
        return GpuStatus(available=False, source="nvml", reason=_init_reason(nvml, e), devices=[])
    try:
        return _read_all(nvml, nvlink_sample_s, sleep)
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass  # nothing left to release that we could act on


def _unreadable(why: str) -> dict[str, Signal]:
    return {n: Signal(name=n, unit=u, source="nvml:nvmlDeviceGetHandleByIndex", missing=f"device unreadable: {why}")
            for n, u in DEVICE_SIGNALS.items()}


def _read_all(nvml: Any, nvlink_sample_s: float, sleep: Callable[[float], None]) -> GpuStatus:
    try:
        count = nvml.nvmlDeviceGetCount()
    except nvml.NVMLError as e:
        return GpuStatus(available=False, source="nvml", reason=f"NVML could not count devices ({e})", devices=[])
    devices: list[GpuDevice] = []
    pending: list[tuple[GpuDevice, _Reader, tuple[dict, dict]]] = []
    start = time.monotonic()
    for i in range(count):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
        except nvml.NVMLError as e:
            devices.append(GpuDevice(index=i, signals=_unreadable(_reason(nvml, e))))
            continue
        reader = _Reader(nvml, handle)
        dev = GpuDevice(index=i, name=_text(reader.call("nvmlDeviceGetName")[0] or "") or None,
                        uuid=_text(reader.call("nvmlDeviceGetUUID")[0] or "") or None)
        pending.append((dev, reader, _nvlink_sample(nvml, handle)))
        reader.read()
        devices.append(dev)
    if any(first[0] for _, _, first in pending):
        sleep(max(0.0, nvlink_sample_s - (time.monotonic() - start)))
    elapsed = time.monotonic() - start
    for dev, reader, first in pending:
        second = _nvlink_sample(nvml, reader.handle) if first[0] else first
        _nvlink_rates(reader, first, second, elapsed)
        dev.signals = reader.signals
    return GpuStatus(available=True, source="nvml", devices=devices)


def _missing(name: str, why: str, window_s: float | None) -> Signal:
    return Signal(name=name, unit=signal_unit(name), window_s=window_s, source="nvml", missing=why)


def _present(status: GpuStatus, device_signal: str) -> tuple[list[Signal], list[str]]:
    sigs = [d.signals.get(device_signal) for d in status.devices]
    ok = [s for s in sigs if s is not None and s.present]
    why = sorted({s.missing for s in sigs if s is not None and not s.present and s.missing} or {"not read"})
    return ok, why


def _note(n_ok: int, n_all: int) -> str:
    part = "" if n_ok == n_all else f"; {n_all - n_ok} device(s) gave no value"
    return f"one NVML reading at probe time over {n_ok} of {n_all} device(s), not a window average{part}"


def _mean(status: GpuStatus, name: str, device_signal: str, window_s: float | None) -> Signal:
    ok, why = _present(status, device_signal)
    if not ok:
        return _missing(name, "; ".join(why), window_s)
    return Signal(name=name, value=sum(s.value for s in ok) / len(ok), unit=signal_unit(name), window_s=window_s,
                  source=f"{ok[0].source} (mean over devices)", note=_note(len(ok), len(status.devices)))


def _value(dev: GpuDevice, name: str) -> float | None:
    sig = dev.signals.get(name)
    return sig.value if sig is not None else None


def _memory_share(status: GpuStatus, window_s: float | None) -> Signal:
    name = "gpu_memory_used_frac"
    pairs = [(u, t) for d in status.devices
             if (u := _value(d, "gpu_memory_used")) is not None and (t := _value(d, "gpu_memory_total")) is not None]
    total = sum(t for _, t in pairs)
    if total <= 0:
        return _missing(name, "; ".join(_present(status, "gpu_memory_used")[1]), window_s)
    return Signal(name=name, value=sum(u for u, _ in pairs) / total, unit=signal_unit(name), window_s=window_s,
                  source="nvml:nvmlDeviceGetMemoryInfo (sum used / sum total)",
                  note=_note(len(pairs), len(status.devices)))


_MEANS = {"gpu_util_avg": "gpu_util", "gpu_power_avg": "gpu_power", "gpu_pcie_tx_avg": "gpu_pcie_tx",
          "gpu_pcie_rx_avg": "gpu_pcie_rx", "gpu_nvlink_tx_avg": "gpu_nvlink_tx", "gpu_nvlink_rx_avg": "gpu_nvlink_rx"}
_DCGM_ONLY = ("gpu_sm_active_avg", "gpu_tensor_active_avg", "gpu_dram_active_avg")


def summarize(status: GpuStatus, window_s: float | None) -> dict[str, Signal]:
    """Snapshot-level GPU signals under the names signals.yaml derives from DCGM."""
    if not status.available or not status.devices:
        why = status.reason or "GPU status unavailable"
        if status.available:
            why = "NVML found no NVIDIA GPU on this machine"
        return {n: _missing(n, why, window_s) for n in SUMMARY_SIGNALS}
    out = {name: _mean(status, name, dev, window_s) for name, dev in _MEANS.items()}
    out["gpu_memory_used_frac"] = _memory_share(status, window_s)
    out.update({n: _missing(n, NO_DCGM, window_s) for n in _DCGM_ONLY})
    return {n: out[n] for n in SUMMARY_SIGNALS}


def process_gpu_bytes(pids: set[int], nvml: ModuleType | Any = None) -> int | None:
    """GPU memory used by these processes on every device (NVML's compute processes), summed: what an
    experiment arm's engine holds. None when NVML cannot be read or none of them holds any."""
    if nvml is None:
        nvml, _ = _load_nvml()
        if nvml is None:
            return None
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        return None
    try:
        total, found = 0, False
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if p.pid in pids and p.usedGpuMemory is not None:
                    total, found = total + int(p.usedGpuMemory), True
        return total if found else None
    except nvml.NVMLError:
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass


# Sampled per block by an experiment (advisor/experiments/arms/engine_readouts.py): what NVML reads of
# the devices an arm's engine holds. The DCGM profiling signals (gpu_sm_active_avg ...) need DCGM.
BLOCK_SIGNALS = ("gpu_util_avg", "gpu_memory_used_frac", "gpu_power_avg")


class GpuSampler:
    """The GPU signals of the devices that some processes hold (an experiment arm's engine), sampled
    in a thread while those processes serve a block: NVML reads a device, not an arm, so only the
    devices where the arm's processes run are read, and a reading after the block would show an
    idle GPU. stop() returns BLOCK_SIGNALS averaged over the samples and devices (memory: its
    highest), all None with `why` when NVML is absent or none of the processes holds a device."""

    def __init__(self, pids: set[int], every_s: float = 0.5, nvml: ModuleType | Any = None):
        self.pids, self.every_s, self._nvml = set(pids), every_s, nvml
        self.devices: list[int] = []
        self.why: str | None = None
        self._samples: dict[str, list[float]] = {name: [] for name in BLOCK_SIGNALS}
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> GpuSampler:
        nvml = self._nvml
        if nvml is None:
            nvml, why = _load_nvml()
            if nvml is None:
                self.why = why
                return self
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as e:
            self.why = _init_reason(nvml, e)
            return self
        self._nvml = nvml
        try:
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
            self.devices = [i for i, h in enumerate(handles)
                            if any(p.pid in self.pids for p in nvml.nvmlDeviceGetComputeRunningProcesses(h))]
        except nvml.NVMLError as e:
            self.why = f"NVML could not list the devices' processes ({e})"
        if not self.devices:
            self.why = self.why or "none of the arm's engine processes holds a GPU"
            self._shutdown()
            return self
        self._handles = [handles[i] for i in self.devices]
        self._sample()
        self._thread = threading.Thread(target=self._run, name="gpu-sampler", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._done.wait(self.every_s):
            self._sample()

    def _sample(self) -> None:
        nvml = self._nvml
        for h in self._handles:
            for name, read in (("gpu_util_avg", lambda: float(nvml.nvmlDeviceGetUtilizationRates(h).gpu)),
                               ("gpu_memory_used_frac", lambda: _frac(nvml.nvmlDeviceGetMemoryInfo(h))),
                               ("gpu_power_avg", lambda: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0)):
                try:
                    v = read()
                except (nvml.NVMLError, ZeroDivisionError):
                    continue
                if v is not None:
                    self._samples[name].append(v)

    def stop(self) -> dict[str, float | None]:
        if self._thread is not None:
            self._done.set()
            self._thread.join(timeout=5)
            self._sample()
            self._thread = None
            self._shutdown()
        out: dict[str, float | None] = {}
        for name, vals in self._samples.items():
            if not vals:
                out[name] = None
            elif name == "gpu_memory_used_frac":
                out[name] = max(vals)
            else:
                out[name] = sum(vals) / len(vals)
        return out

    def _shutdown(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass


def _frac(mem: Any) -> float | None:
    return mem.used / mem.total if mem.total else None
