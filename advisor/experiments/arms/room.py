"""Whether this host has room for N+1 engine replicas beside what it runs (the replicas knob with the
local launcher, and an engine's own data parallelism), and if not, what is missing, in one line.

Cores: the candidate's N+1 replicas serve at once, so each needs its own cores, as many as the
baseline's engine has; engines that bind their threads to fixed cores would put every replica on the
same ones, and sharing cores measures contention, not capacity. vLLM's CPU backend binds by
VLLM_CPU_OMP_THREADS_BIND (auto: all cores but one, the one left for its API server and engine
core), so each replica needs its worker's cores and one more, and the launcher gives each its own
range (`binds`), the first one where auto binding puts the baseline's worker. Measured on a 2-core
host with each of two replicas on its own core and no core left over: the queue's TTFT p50 rose from
0.1-0.3 s to 2.5-5.7 s, and the load generator itself fell behind. Memory: every engine the experiment starts beside
the ones already running needs about what the running baseline holds. GPUs: a replica per GPU set
needs CUDA_VISIBLE_DEVICES per replica, which the local launcher does not place yet.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil
from probes.gpu import read_gpus

# The share of available memory the added engines may take: the page cache, the advisor and a
# burst of requests need the rest.
MEMORY_SHARE = 0.8


@dataclass(frozen=True)
class Host:
    cores: int
    available_bytes: int
    gpus: int = 0
    numa_nodes: int = 1

    @classmethod
    def this(cls) -> Host:
        gpus = read_gpus(nvlink_sample_s=0.0)
        return cls(cores=len(os.sched_getaffinity(0)), available_bytes=psutil.virtual_memory().available,
                   gpus=len(gpus.devices) if gpus.available else 0, numa_nodes=_numa_nodes())


def _numa_nodes() -> int:
    """NUMA nodes with CPUs (Linux sysfs); 1 where the kernel does not say."""
    root = "/sys/devices/system/node"
    try:
        nodes = [n for n in os.listdir(root) if n.startswith("node") and n[4:].isdigit()]
    except OSError:
        return 1
    with_cpus = 0
    for n in nodes:
        try:
            with open(f"{root}/{n}/cpulist") as f:
                with_cpus += bool(f.read().strip())
        except OSError:
            continue
    return max(1, with_cpus)


def data_parallel_refusal(engine: str, platform: str | None, size: int, tensor_parallel: int,
                          host: Host) -> str | None:
    """Why an engine's own data parallelism of `size` ranks does not fit this host, or None.
    A GPU host needs size x tensor_parallel GPUs. vLLM's CPU build gives each data-parallel rank its
    own NUMA node(s) (vllm/utils/ompmultiprocessing.py: the rank's threads bind within the memory
    nodes sliced for its DP offset, and it asserts there are enough): read from the source only."""
    if size <= 1:
        return None
    if host.gpus:
        need = size * tensor_parallel
        if need > host.gpus:
            return (f"data_parallel {size} x tensor_parallel {tensor_parallel} needs {need} GPUs; this host has "
                    f"{host.gpus}")
        return None
    if engine == "vllm" and platform == "cpu" and size > host.numa_nodes:
        return (f"vLLM's CPU build gives each data-parallel rank its own NUMA node "
                f"(vllm/utils/ompmultiprocessing.py): {size} ranks need {size}; this host has {host.numa_nodes}. "
                "The replicas knob tests the same capacity with engine processes on their own cores")
    return None


@dataclass(frozen=True)
class EngineCores:
    """How many cores one engine process takes, and whether every replica would take the same ones."""
    cores: int | None  # None: not known for this engine
    source: str        # where that was read, for the refusal's words
    same_for_every_replica: bool = False
    bind_env: str | None = None  # the variable that gives a replica its own cores (placeable), if any
    reserved: int = 0  # cores each replica leaves beside its worker for its other processes


def engine_cores(engine: str, args: list[str], env: dict[str, str], host: Host) -> EngineCores:
    """From the engine's argv and environment, the way the engine itself decides it."""
    if engine == "vllm":
        bind = env.get("VLLM_CPU_OMP_THREADS_BIND", "auto")
        if bind in ("auto", ""):
            # vllm/utils/ompmultiprocessing.py (0.32): auto binding takes all cores of the NUMA node but the reserved one
            # (on this 2-core host: CPU 0, advisor/cores.py); each replica can be given its own.
            return EngineCores(max(1, host.cores - 1), "vLLM's CPU worker binds all cores but one "
                               "(VLLM_CPU_OMP_THREADS_BIND=auto), the one left serving its API server and engine "
                               "core", same_for_every_replica=True, bind_env="VLLM_CPU_OMP_THREADS_BIND", reserved=1)
        if bind == "nobind":
            return EngineCores(None, "VLLM_CPU_OMP_THREADS_BIND=nobind")
        return EngineCores(len(_cpu_list(bind.split("|")[0])), f"VLLM_CPU_OMP_THREADS_BIND={bind}, and a core for its "
                           "API server and engine core", same_for_every_replica=True,
                           bind_env="VLLM_CPU_OMP_THREADS_BIND", reserved=1)
    if engine == "llamacpp":
        for flag in ("-t", "--threads"):
            if flag in args[:-1]:
                try:
                    return EngineCores(max(1, int(args[args.index(flag) + 1])), f"llama-server {flag}")
                except ValueError:
                    break
        # common/common.cpp: the default is cpu_get_num_math(), the physical cores.
        return EngineCores(psutil.cpu_count(logical=False) or host.cores,
                           "llama-server's default threads (the physical cores)")
    return EngineCores(None, f"{engine} does not say how many cores it takes")


def _cpu_list(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            a, b = part.split("-", 1)
            out.update(range(int(a), int(b) + 1))
        elif part:
            out.add(int(part))
    return out


def refusal(replicas: int, engines_added: int, cores: EngineCores, bytes_per_engine: int | None,
            host: Host) -> str | None:
    """Why `replicas` engines serving at once (and `engines_added` started beside what runs now) do
    not fit this host, or None. Unknowns are not refusals: the caller notes them."""
    if host.gpus:
        return (f"{replicas} replicas on a host with {host.gpus} GPU(s) need a GPU set per replica "
                "(CUDA_VISIBLE_DEVICES for each), which the local launcher does not place yet")
    if cores.cores is not None:
        if cores.same_for_every_replica and replicas > 1 and cores.bind_env is None:
            return (f"{cores.source}, the same cores for every replica: {replicas} replicas would share "
                    f"{cores.cores} of this host's {host.cores} cores and measure contention, not capacity")
        each = cores.cores + cores.reserved
        if replicas * each > host.cores:
            return (f"{replicas} replicas of {each} core(s) each ({cores.source}) need "
                    f"{replicas * each} cores; this host has {host.cores}")
    if bytes_per_engine is not None and engines_added * bytes_per_engine > MEMORY_SHARE * host.available_bytes:
        gib = 2 ** 30
        return (f"{engines_added} more engine(s) of about {bytes_per_engine / gib:.1f} GiB each (the running "
                f"baseline's resident memory) need {engines_added * bytes_per_engine / gib:.1f} GiB; this host has "
                f"{host.available_bytes / gib:.1f} GiB available, of which the experiment takes at most "
                f"{MEMORY_SHARE:.0%}")
    return None


def binds(cores: EngineCores, replicas: int) -> list[dict[str, str]]:
    """Each replica's own environment: for an engine bound by a variable, replica i's worker on c
    cores from i*(c + reserved), the reserved ones after it left to its other processes; otherwise
    nothing to set."""
    if cores.bind_env is None or cores.cores is None or replicas < 2:
        return [{} for _ in range(replicas)]
    c, stride = cores.cores, cores.cores + cores.reserved
    return [{cores.bind_env: f"{i * stride}" if c == 1 else f"{i * stride}-{i * stride + c - 1}"}
            for i in range(replicas)]


def unknowns(cores: EngineCores, bytes_per_engine: int | None) -> list[str]:
    """What the check could not know, for the report."""
    out = []
    if cores.cores is None:
        out.append(f"room for the replicas' cores not checked: {cores.source}")
    if bytes_per_engine is None:
        out.append("room for the replicas' memory not checked: no running baseline to measure")
    return out
