"""Resident memory of the process serving a port, read from the live process: the whole tree's RSS
and the part of it that maps a given file (as llama.cpp maps its GGUF weights)."""

import subprocess
import sys
import time

from advisor.experiments.arms.processes import resident_bytes
from advisor.localstack.paths import free_port

SERVE = """
import mmap, socket, sys, time
f = open(sys.argv[1], "rb")
m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
touched = sum(m[i] for i in range(0, len(m), 4096))  # every page resident
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[2]))); s.listen()
print("ready", flush=True)
time.sleep(60)
"""


def test_the_mapped_part_of_a_port_holders_memory_is_the_file_it_maps(tmp_path):
    weights = tmp_path / "weights.gguf"
    weights.write_bytes(b"\x01" * (8 * 2**20))
    other = tmp_path / "other.gguf"
    other.write_bytes(b"\x02" * 4096)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", SERVE, str(weights), str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        total, mapped, gpu = resident_bytes(port, (str(weights),))
        assert mapped is not None and 7.5 * 2**20 <= mapped <= 8 * 2**20 + 4096
        assert total > mapped and gpu is None  # a CPU process holds no GPU memory
        assert resident_bytes(port, (str(other),))[1] is None  # a file it does not map: no mapped part
    finally:
        proc.kill()
        proc.wait(10)
    time.sleep(0.2)
    assert resident_bytes(port, (str(weights),)) == (None, None, None)  # nothing serves the port any more
