"""GPU memory of an experiment arm's processes, through NVML (a stand-in module: no GPU here)."""

from types import SimpleNamespace

from probes.gpu import process_gpu_bytes


class NVMLError(Exception):
    pass


def nvml(devices, fail_init=False):
    def init():
        if fail_init:
            raise NVMLError("no driver")

    return SimpleNamespace(
        NVMLError=NVMLError, nvmlInit=init, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: len(devices),
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetComputeRunningProcesses=lambda h: [SimpleNamespace(pid=p, usedGpuMemory=b) for p, b in devices[h]])


def test_the_arms_processes_are_summed_over_every_device():
    fake = nvml([[(10, 1000), (99, 5000)], [(11, 300), (12, None)]])
    assert process_gpu_bytes({10, 11, 12}, nvml=fake) == 1300


def test_none_when_no_process_of_the_arm_is_on_a_gpu_or_nvml_cannot_start():
    assert process_gpu_bytes({1}, nvml=nvml([[(10, 1000)]])) is None
    assert process_gpu_bytes({10}, nvml=nvml([[(10, 1000)]], fail_init=True)) is None


# -- GPU signals of an arm's devices, sampled while it serves a block ----------------------------------

def test_an_arm_s_devices_are_sampled_during_its_block_and_no_other_device():
    import time

    from probes.gpu import GpuSampler
    from tests.unit.test_gpu import MIB, FakeNVML

    mine = {"util": 80, "mem": (30_000 * MIB, 80_000 * MIB), "power_mw": 400_000, "procs": [(10, 1)]}
    other = {"util": 5, "mem": (79_000 * MIB, 80_000 * MIB), "power_mw": 90_000, "procs": [(99, 1)]}
    fake = FakeNVML([other, mine])
    s = GpuSampler({10, 11}, every_s=0.01, nvml=fake).start()
    time.sleep(0.05)
    mine["util"] = 40  # the block's second half
    time.sleep(0.05)
    out = s.stop()
    assert s.devices == [1] and fake.shutdowns == 1
    assert 40 < out["gpu_util_avg"] < 80, out
    assert out["gpu_memory_used_frac"] == 0.375 and out["gpu_power_avg"] == 400.0


def test_no_device_of_the_arm_means_no_gpu_readout_and_says_why():
    from probes.gpu import GpuSampler
    from tests.unit.test_gpu import MIB, FakeNVML

    fake = FakeNVML([{"util": 5, "mem": (1 * MIB, 2 * MIB), "power_mw": 1, "procs": [(99, 1)]}])
    s = GpuSampler({10}, nvml=fake).start()
    assert s.stop() == {"gpu_util_avg": None, "gpu_memory_used_frac": None, "gpu_power_avg": None}
    assert s.why == "none of the arm's engine processes holds a GPU"


def test_a_block_watch_of_a_local_arm_reads_its_gpu_signals(monkeypatch):
    """The block's watch hands the arm's own process tree (the loopback port's holder) to the sampler;
    its readings become the block's signals beside the engine's /metrics ones."""
    import httpx

    from advisor.experiments.arms import engine_readouts
    from tests.unit.test_gpu import MIB, FakeNVML

    monkeypatch.setattr(engine_readouts, "serving_pids", lambda url: {10})
    fake = FakeNVML([{"util": 70, "mem": (1 * MIB, 4 * MIB), "power_mw": 250_000, "procs": [(10, 1)]}])
    page = "vllm:num_requests_running{model_name=\"m\"} 1\n"
    transport = httpx.MockTransport(lambda req: httpx.Response(200, text=page))
    w = engine_readouts.BlockWatch("http://127.0.0.1:8000", "vllm", "m", ("gpu_util_avg", "gpu_memory_used_frac"),
                                   every_s=0.01, transport=transport, nvml=fake)
    r = w.readout(0)
    assert r.signals["gpu_util_avg"] == 70.0 and r.signals["gpu_memory_used_frac"] == 0.25
