"""The runtime's background thread: named, and under SCHED_BATCH unless told otherwise
(core/cycle_driver.cc says why)."""

import os
import subprocess
import sys
import time

import pytest

import tfring

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="thread names and SCHED_BATCH are Linux's")


def _threads_named(name, pid="self"):
    found = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if f.read().strip() == name:
                    found.append(int(tid))
        except FileNotFoundError:  # the thread ended meanwhile
            pass
    return found


def _cycle_threads():
    # The thread names itself when it starts running, which may come after init() returns.
    deadline = time.monotonic() + 10
    while not (tids := _threads_named("tfring-cycles")) and time.monotonic() < deadline:
        time.sleep(0.01)
    return tids


def test_background_thread_runs_under_sched_batch():
    tfring.init()  # a one-process job: the thread and its policy do not depend on the size
    tfring.allreduce(1.0, name="thread.warm")  # the runtime is up and cycling
    tids = _cycle_threads()
    assert len(tids) == 1, f"expected one tfring-cycles thread, found {tids}"
    assert os.sched_getscheduler(tids[0]) == os.SCHED_BATCH
    # Only that thread: the caller's (this one) keeps the normal policy.
    assert os.sched_getscheduler(0) == os.SCHED_OTHER


_CHILD = """
import os, sys, time, tfring
tfring.init()
deadline = time.monotonic() + 10
while True:  # the thread names itself when it starts running
    tids = [int(t) for t in os.listdir('/proc/self/task')
            if open(f'/proc/self/task/{t}/comm').read().strip() == 'tfring-cycles']
    if tids or time.monotonic() > deadline:
        break
    time.sleep(0.01)
print('policies', [os.sched_getscheduler(t) for t in tids])
tfring.shutdown()
"""


def _child_env(**extra):
    # A one-process job of its own: no trace of this job's MPI launch in its environment.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMIX_", "PRTE_"))}
    env.update(extra)
    return env


@pytest.mark.parametrize("setting, policy", [("0", os.SCHED_OTHER), ("1", os.SCHED_BATCH)])
def test_setting_chooses_the_policy(setting, policy):
    out = subprocess.run([sys.executable, "-c", _CHILD], env=_child_env(TFRING_SCHED_BATCH=setting),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"policies [{policy}]" in out.stdout, out.stdout + out.stderr[-2000:]


def test_malformed_setting_is_an_error_naming_it():
    out = subprocess.run([sys.executable, "-c", _CHILD], env=_child_env(TFRING_SCHED_BATCH="2"),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "TFRING_SCHED_BATCH must be 0 or 1" in out.stderr
