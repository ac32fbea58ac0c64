"""Engine placement on small hosts, on a real process tree shaped like vLLM's CPU engine: an API
server whose children are a worker pinned to one core and an unpinned engine core."""

import os
import subprocess
import sys
import time

import psutil
import pytest

from advisor.cores import isolate_engine_core

# The "API server": starts a pinned "worker" and an unpinned "engine core", then waits.
TREE = """
import os, subprocess, sys, time
worker = "import os, time; os.sched_setaffinity(0, {0}); time.sleep(60)"
core = "import time; time.sleep(60)"
kids = [subprocess.Popen([sys.executable, "-c", c]) for c in (worker, core)]
print(" ".join(str(k.pid) for k in kids), flush=True)
time.sleep(60)
"""


@pytest.fixture
def tree():
    api = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    worker, core = (int(x) for x in api.stdout.readline().split())
    deadline = time.monotonic() + 10
    while psutil.Process(worker).cpu_affinity() != [0] and time.monotonic() < deadline:
        time.sleep(0.05)
    yield api.pid, worker, core
    for pid in (worker, core, api.pid):
        try:
            psutil.Process(pid).kill()
        except psutil.Error:
            pass
    api.wait()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 or psutil.cpu_count() < 2, reason="needs two usable cores")
def test_engine_core_joins_its_worker_and_the_api_server_gets_the_rest(tree):
    api, worker, core = tree
    rest = sorted(set(range(psutil.cpu_count())) - {0})
    note = isolate_engine_core(api)
    assert note == f"engine core beside its worker on CPU 0, API server on CPU {','.join(map(str, rest))}"
    assert psutil.Process(core).cpu_affinity() == [0]
    assert psutil.Process(worker).cpu_affinity() == [0]
    assert psutil.Process(api).cpu_affinity() == rest
    assert isolate_engine_core(api) is None, "a second call finds nothing left to move"


def test_an_engine_that_pins_nothing_is_left_alone():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        before = psutil.Process(p.pid).cpu_affinity()
        assert isolate_engine_core(p.pid) is None
        assert psutil.Process(p.pid).cpu_affinity() == before
    finally:
        p.kill()
        p.wait()


def test_a_process_that_is_gone_is_not_an_error():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert isolate_engine_core(p.pid) is None
