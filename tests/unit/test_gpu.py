"""probes.gpu against a fake NVML with known readings, and against the real library here."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from probes.catalog import signal_unit
from probes.gpu import DEVICE_SIGNALS, NO_DCGM, SUMMARY_SIGNALS, read_gpus, summarize
from probes.snapshot import GpuStatus

MIB = 1024 * 1024
ALL_LINKS = 0xFFFFFFFF


class NVMLError(Exception):
    def __init__(self, value):
        super().__init__(value)
        self.value = value

    def __str__(self):
        return {3: "Not Supported", 9: "Driver Not Loaded", 13: "Function Not Found"}.get(self.value, "Unknown Error")


class NVMLError_NotSupported(NVMLError):
    def __init__(self):
        super().__init__(3)


def _field(kib, ts_us, ret=0):
    return SimpleNamespace(nvmlReturn=ret, valueType=3, value=SimpleNamespace(ullVal=kib), timestamp=ts_us)


class FakeNVML:
    """The slice of the pynvml API probes.gpu uses. A device is a dict of readings; a reading that
    is an exception is raised instead of returned. `nvlink` lists successive field-value reads."""

    NVMLError = NVMLError
    NVML_SUCCESS = 0
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_NO_PERMISSION = 4
    NVML_ERROR_DRIVER_NOT_LOADED = 9
    NVML_ERROR_LIBRARY_NOT_FOUND = 12
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_PCIE_UTIL_TX_BYTES = 0
    NVML_PCIE_UTIL_RX_BYTES = 1
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3

    def __init__(self, devices, init_error=None, shutdown_error=None):
        self.devices, self.init_error, self.shutdown_error = devices, init_error, shutdown_error
        self.shutdowns = 0
        self.field_reads = {}

    def _get(self, handle, key):
        v = handle[key]
        if isinstance(v, Exception):
            raise v
        return v

    def nvmlInit(self):
        if self.init_error is not None:
            raise self.init_error

    def nvmlShutdown(self):
        self.shutdowns += 1
        if self.shutdown_error is not None:
            raise self.shutdown_error

    def nvmlDeviceGetCount(self):
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i):
        return self._get({"h": self.devices[i]}, "h")

    def nvmlDeviceGetName(self, h):
        return self._get(h, "name")

    def nvmlDeviceGetUUID(self, h):
        return self._get(h, "uuid")

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=self._get(h, "util"), memory=0)

    def nvmlDeviceGetMemoryInfo(self, h):
        used, total = self._get(h, "mem")
        return SimpleNamespace(used=used, total=total, free=total - used)

    def nvmlDeviceGetPowerUsage(self, h):
        return self._get(h, "power_mw")

    def nvmlDeviceGetClockInfo(self, h, clock):
        return self._get(h, "clocks")[clock]

    def nvmlDeviceGetPcieThroughput(self, h, counter):
        return self._get(h, "pcie_kbs")[counter]

    def nvmlDeviceGetFieldValues(self, h, fields):
        assert fields == [(138, ALL_LINKS), (139, ALL_LINKS)], "NVLink must be asked for all links"
        reads = self._get(h, "nvlink")
        n = self.field_reads.get(id(h), 0)
        self.field_reads[id(h)] = n + 1
        return reads[min(n, len(reads) - 1)]

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in self._get(h, "procs")]


def h100(**over):
    dev = {
        "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0000", "util": 75,
        "mem": (40960 * MIB, 81920 * MIB), "power_mw": 350_000,
        "clocks": {1: 1980, 2: 2619}, "pcie_kbs": {0: 1000, 1: 2000},
        # 2048 KiB out and 4096 KiB in over 0.2 s of NVML time
        "nvlink": [[_field(1000, 1_000_000), _field(5000, 1_000_000)],
                   [_field(3048, 1_200_000), _field(9096, 1_200_000)]],
        "procs": [(1234, 40000 * MIB), (5678, None)],
    }
    dev.update(over)
    return dev


def l4(**over):
    dev = {
        "name": b"NVIDIA L4", "uuid": b"GPU-0001", "util": 25,
        "mem": (20480 * MIB, 81920 * MIB), "power_mw": 150_000,
        "clocks": {1: 2040, 2: 6251}, "pcie_kbs": {0: 3000, 1: 4000},
        "nvlink": [[_field(0, 0, ret=3), _field(0, 0, ret=3)]],
        "procs": [],
    }
    dev.update(over)
    return dev


def read(fake):
    sleeps = []
    status = read_gpus(fake, nvlink_sample_s=0.2, sleep=sleeps.append)
    return status, sleeps


def test_two_devices_give_exact_signals_and_units():
    fake = FakeNVML([h100(), l4()])
    status, sleeps = read(fake)
    assert status.available and status.source == "nvml" and status.reason is None
    d0, d1 = status.devices
    assert (d0.index, d0.name, d0.uuid) == (0, "NVIDIA H100 80GB HBM3", "GPU-0000")
    assert (d1.name, d1.uuid) == ("NVIDIA L4", "GPU-0001")  # bytes from older pynvml are decoded

    v = {k: s.value for k, s in d0.signals.items()}
    assert v == {
        "gpu_util": 75.0, "gpu_memory_used": 40960.0, "gpu_memory_total": 81920.0,
        "gpu_memory_used_frac": 0.5, "gpu_power": 350.0, "gpu_sm_clock": 1980.0, "gpu_mem_clock": 2619.0,
        "gpu_pcie_tx": 1000 * 1024.0, "gpu_pcie_rx": 2000 * 1024.0,
        "gpu_nvlink_tx": pytest.approx(2048 * 1024 / 0.2), "gpu_nvlink_rx": pytest.approx(4096 * 1024 / 0.2),
        "gpu_process_count": 2.0,
    }
    for dev in status.devices:
        assert {k: s.unit for k, s in dev.signals.items()} == DEVICE_SIGNALS
    assert d0.signals["gpu_util"].source == "nvml:nvmlDeviceGetUtilizationRates"
    assert d0.signals["gpu_process_count"].note == "pid:MiB 1234:40000 5678:?"
    assert d1.signals["gpu_process_count"].value == 0.0

    for name in ("gpu_nvlink_tx", "gpu_nvlink_rx"):
        assert d1.signals[name].value is None
        assert d1.signals[name].missing == "not supported on this device"
    assert len(sleeps) == 1 and 0 <= sleeps[0] <= 0.2
    assert fake.shutdowns == 1


def test_summary_matches_signal_catalog_units():
    status, _ = read(FakeNVML([h100(), l4()]))
    s = summarize(status, 30.0)
    assert list(s) == list(SUMMARY_SIGNALS)
    for name, sig in s.items():
        assert sig.unit == signal_unit(name), name
        assert sig.window_s == 30.0
    assert s["gpu_util_avg"].value == pytest.approx(50.0)
    assert s["gpu_memory_used_frac"].value == pytest.approx((40960 + 20480) / (2 * 81920))
    assert s["gpu_power_avg"].value == pytest.approx(250.0)
    assert s["gpu_pcie_tx_avg"].value == pytest.approx(2000 * 1024.0)
    assert s["gpu_pcie_rx_avg"].value == pytest.approx(3000 * 1024.0)
    # Only the H100 has NVLink readings: the mean covers it alone and says so.
    assert s["gpu_nvlink_tx_avg"].value == pytest.approx(2048 * 1024 / 0.2)
    assert "1 of 2" in s["gpu_nvlink_tx_avg"].note
    for name in ("gpu_sm_active_avg", "gpu_tensor_active_avg", "gpu_dram_active_avg"):
        assert s[name].value is None and s[name].missing == NO_DCGM


def test_power_not_supported_is_a_missing_reason_not_an_error():
    fake = FakeNVML([h100(power_mw=NVMLError_NotSupported()), l4()])
    status, _ = read(fake)
    power = status.devices[0].signals["gpu_power"]
    assert power.value is None and power.missing == "not supported on this device"
    others = {k: s for k, s in status.devices[0].signals.items() if k != "gpu_power"}
    assert all(s.present for s in others.values())
    assert summarize(status, 30.0)["gpu_power_avg"].value == pytest.approx(150.0)
    assert fake.shutdowns == 1


def test_every_reading_failing_leaves_every_signal_missing():
    err = NVMLError(999)
    dev = {k: err for k in h100()}
    status, sleeps = read(FakeNVML([dev]))
    d = status.devices[0]
    assert d.name is None and d.uuid is None
    assert set(d.signals) == set(DEVICE_SIGNALS)
    assert all(not s.present and s.missing == "NVML error: Unknown Error" for s in d.signals.values())
    assert sleeps == []  # nothing to sample twice
    assert all(not s.present for s in summarize(status, 30.0).values())


def test_missing_nvlink_function_and_unreadable_handle():
    fake = FakeNVML([h100(nvlink=NVMLError(13)), NVMLError(15)])
    status, sleeps = read(fake)
    assert status.devices[0].signals["gpu_nvlink_rx"].missing == "NVML error: Function Not Found"
    assert status.devices[0].signals["gpu_util"].value == 75.0
    assert all(s.missing.startswith("device unreadable") for s in status.devices[1].signals.values())
    assert sleeps == []


def test_stale_nvlink_counter_has_no_rate():
    same = [_field(1000, 1_000_000), _field(1000, 1_000_000)]
    status, _ = read(FakeNVML([h100(nvlink=[same, [_field(900, 1_200_000), _field(900, 1_200_000)]])]))
    assert "not refreshed" in status.devices[0].signals["gpu_nvlink_tx"].missing


def test_driver_not_loaded_gives_unavailable_status():
    fake = FakeNVML([h100()], init_error=NVMLError(9))
    status = read_gpus(fake)
    assert status == GpuStatus(available=False, source="nvml",
                               reason="no NVIDIA driver loaded: GPU signals unavailable", devices=[])
    assert fake.shutdowns == 0  # nothing was initialised
    s = summarize(status, 30.0)
    assert set(s) == set(SUMMARY_SIGNALS)
    assert all(sig.value is None and sig.missing == status.reason for sig in s.values())
    assert all(sig.unit == signal_unit(n) for n, sig in s.items())


def test_shutdown_error_is_swallowed():
    fake = FakeNVML([l4()], shutdown_error=NVMLError(999))
    assert read(fake)[0].available


def test_no_devices_is_available_but_says_so():
    status, _ = read(FakeNVML([]))
    assert status.available and status.devices == []
    assert {s.missing for s in summarize(status, None).values()} == {"NVML found no NVIDIA GPU on this machine"}


def test_real_nvml_on_this_machine():
    status = read_gpus()
    if not Path("/proc/driver/nvidia").exists():
        assert not status.available and status.devices == []
        assert "driver" in status.reason
        return
    # A machine with a driver: every device reports every signal, as a value or a reason.
    assert status.available and status.devices
    for dev in status.devices:
        assert dev.uuid and {k: s.unit for k, s in dev.signals.items()} == DEVICE_SIGNALS
        assert all(s.present or s.missing for s in dev.signals.values())
        assert dev.signals["gpu_memory_total"].present
