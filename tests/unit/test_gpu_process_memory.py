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
