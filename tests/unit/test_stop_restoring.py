"""A worker told to stop (the dashboard's experiment, advisor/app/jobs.py) is given the time to
restore its baseline: it gets SIGTERM (the advisor's interrupt) and is waited for, never SIGKILLed at
once as subprocess.run does."""

import subprocess
import sys
import time

from advisor import children

CHILD = """
import signal, sys, time
def restore(*_):
    time.sleep(1.0)  # the restore takes a while
    open(sys.argv[1], "w").write("restored")
    sys.exit(143)
signal.signal(signal.SIGTERM, restore)
print("ready", flush=True)
time.sleep(60)
"""


def test_the_child_restores_before_it_exits(tmp_path):
    mark = tmp_path / "mark"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(mark)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    t0 = time.monotonic()
    children.stop_restoring(proc)
    assert proc.returncode == 143 and mark.read_text() == "restored"
    assert 0.9 < time.monotonic() - t0 < 30


def test_a_child_that_never_ends_is_killed_after_the_wait(tmp_path):
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", stubborn], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    children.stop_restoring(proc, wait_s=1.0)
    assert proc.returncode == -9
