"""A timeline survives its process being killed: flushed every cycle, and repaired on read."""

import json
import os
import subprocess
import sys

import pytest

from tfring import timeline

KILLED_JOB = """
import os, signal
import tensorflow as tf
import tfring
tfring.init()                       # TFRING_TIMELINE is set: rank 0 (this process) writes
for i in range(5):
    tfring.allreduce(tf.ones([8]), name=f"step{i}")
os.kill(os.getpid(), signal.SIGKILL)  # no stop_timeline, no exit handlers
"""


def test_timeline_of_a_killed_job_is_readable(tmp_path):
    path = tmp_path / "killed.json"
    env = dict(os.environ, TFRING_TIMELINE=str(path), TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", KILLED_JOB], env=env, timeout=120,
                          capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr
    text = path.read_text()
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)  # no closing bracket: the process never stopped the timeline
    totals = timeline.phase_totals(timeline.load(str(path)))
    assert sorted(totals) == [f"step{i}" for i in range(5)]
    for phases in totals.values():
        assert {"NEGOTIATE", "QUEUE", "MPI_ALLREDUCE"} <= set(phases)


def test_a_torn_last_event_is_dropped(tmp_path):
    path = tmp_path / "torn.json"
    path.write_text('[\n{"name": "thread_name", "ph": "M", "pid": 0, "tid": 1, '
                    '"args": {"name": "t"}},\n'
                    '{"name": "NEGOTIATE", "ph": "B", "pid": 0, "tid": 1, "ts": 10},\n'
                    '{"ph": "E", "pid": 0, "tid": 1, "ts": 25},\n'
                    '{"name": "QUEUE", "ph": "B", "pid": 0, "ti')
    events = timeline.load(str(path))
    assert len(events) == 3
    assert timeline.phase_totals(events)["t"]["NEGOTIATE"] == [15, 1]


def test_summary_command(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps([
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": 1, "args": {"name": "grad/w"}},
        {"name": "NEGOTIATE", "ph": "B", "pid": 0, "tid": 1, "ts": 0},
        {"ph": "E", "pid": 0, "tid": 1, "ts": 1000},
        {"name": "MPI_ALLREDUCE", "ph": "B", "pid": 0, "tid": 1, "ts": 1000},
        {"ph": "E", "pid": 0, "tid": 1, "ts": 4000}, {}]))
    out = subprocess.run([sys.executable, "-m", "tfring.timeline", "summary", str(path)],
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert out.returncode == 0, out.stderr
    assert "grad/w: 4.000 ms: MPI_ALLREDUCE 3.000 (1), NEGOTIATE 1.000 (1)" in out.stdout
    assert "MPI_ALLREDUCE" in out.stdout.split("all tensors:")[1]
