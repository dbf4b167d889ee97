"""A Horovod job's HOROVOD_* settings keep working: read where the TFRING_* one is not set."""

import os
import subprocess
import sys

from tfring import timeline

JOB = """
import tensorflow as tf
import tfring
tfring.init()
for i in range(3):
    tfring.allreduce(tf.ones([4]), name=f"step{i}")
tfring.shutdown()
"""


def run_job(tmp_path, **settings):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TFRING_", "HOROVOD_"))}
    env.update(settings, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, "-c", JOB], env=env, timeout=120,
                          capture_output=True, text=True, cwd=tmp_path)


def test_horovod_names_are_read(tmp_path):
    path = tmp_path / "horovod.json"
    proc = run_job(tmp_path, HOROVOD_TIMELINE=str(path), HOROVOD_LOG_LEVEL="WARNING",
                   HOROVOD_FUSION_THRESHOLD="1048576")
    assert proc.returncode == 0, proc.stderr
    assert sorted(timeline.phase_totals(timeline.load(str(path)))) == \
        ["step0", "step1", "step2"]


def test_tfring_names_win_and_dynamic_writes_nothing(tmp_path):
    mine = tmp_path / "tfring.json"
    proc = run_job(tmp_path, TFRING_TIMELINE=str(mine), HOROVOD_TIMELINE="DYNAMIC")
    assert proc.returncode == 0, proc.stderr
    assert mine.exists() and not (tmp_path / "DYNAMIC").exists()
    proc = run_job(tmp_path, HOROVOD_TIMELINE="DYNAMIC")
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "DYNAMIC").exists()


def test_a_bad_horovod_value_names_the_variable(tmp_path):
    proc = run_job(tmp_path, HOROVOD_CYCLE_TIME="soon")
    assert proc.returncode != 0
    assert "HOROVOD_CYCLE_TIME must be a number" in proc.stderr, proc.stderr[-2000:]
