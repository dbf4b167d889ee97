"""A checkpoint of shard_optimizer_state=True saved at 2 ranks resumes at 3, sharded and
unsharded, as the unsharded checkpoint does, and in a process without tfring
(tests/jobs/_sharded_resume.py)."""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MPIRUN = os.path.join(os.path.dirname(sys.executable), "mpirun")


def _job(np_, *args):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([MPIRUN, "--oversubscribe", "-np", str(np_), sys.executable,
                           os.path.join(HERE, "_sharded_resume.py"), *args],
                          capture_output=True, text=True, timeout=240, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    return out


def test_saved_at_two_ranks_resumes_at_three(tmp_path):
    out = _job(2, "save", str(tmp_path))
    assert "rank 0: saved at 2 ranks" in out, out[-4000:]
    out = _job(3, "resume", str(tmp_path))
    for rank in range(3):
        assert f"rank {rank}: resumed at 3 ranks, all four alike: True" in out, out[-4000:]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "_sharded_resume.py"), "without",
                           str(tmp_path)], capture_output=True, text=True, timeout=240, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert ("without tfring: state as unsharded: True, resumed alike: True, tfring imported: "
            "False") in out, out[-4000:]
