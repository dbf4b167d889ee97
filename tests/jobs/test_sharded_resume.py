"""A checkpoint of shard_optimizer_state=True saved at one number of ranks resumes at another
(2 to 3 and 3 to 2 on Keras 3, 2 to 3 on tf_keras), sharded and unsharded, as the unsharded
checkpoint does, and in a process without tfring (tests/jobs/_sharded_resume.py)."""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MPIRUN = os.path.join(os.path.dirname(sys.executable), "mpirun")
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
ENV.pop("TF_USE_LEGACY_KERAS", None)
TF_KERAS = dict(ENV, TF_USE_LEGACY_KERAS="1")


def _run(command, env):
    proc = subprocess.run(command, capture_output=True, text=True, timeout=240, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    return out


def _chain(env, tmp_path, *back):
    """The three tfring jobs of _sharded_resume.py's `chain` in one mpirun of 3 processes."""
    env = dict(env, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return _run([MPIRUN, "--oversubscribe", "-np", "3", sys.executable,
                 os.path.join(HERE, "_sharded_resume.py"), "chain", str(tmp_path), *back], env)


def _assert_saved_and_resumed(out, back):
    for rank in range(2):
        assert f"rank {rank}: saved at 2 ranks" in out, out[-4000:]
    for rank in range(3):
        assert f"rank {rank}: resumed at 3 ranks, all four alike: True" in out, out[-4000:]
        assert f"rank {rank}: saved at 3 ranks" in out, out[-4000:]
    for rank in range(2):
        assert (f"rank {rank}: resumed at 2 ranks, all four alike: True" in out) == back, \
            out[-4000:]
    assert "rank 2: saved at 2 ranks" not in out, out[-4000:]


def _assert_plain_keras_resumes_it(folder, env, flavour):
    out = _run([sys.executable, os.path.join(HERE, "_sharded_resume.py"), "without",
                str(folder)], env)
    assert (f"without tfring ({flavour}): state as unsharded: True, resumed alike: True, "
            "tfring imported: False") in out, out[-4000:]


# Two tests, so that the suite's two-at-a-time jobs stage runs the flavours side by side.
def test_keras3_saved_at_2_resumes_at_3_and_saved_at_3_at_2(tmp_path):
    _assert_saved_and_resumed(_chain(ENV, tmp_path, "back"), back=True)
    _assert_plain_keras_resumes_it(tmp_path / "at3", ENV, "Keras 3")


def test_tf_keras_saved_at_2_resumes_at_3(tmp_path):
    # TensorFlow checkpoints (tf_keras's save_weights without .h5), from 2 ranks to 3.
    _assert_saved_and_resumed(_chain(TF_KERAS, tmp_path), back=False)
    _assert_plain_keras_resumes_it(tmp_path / "at2", TF_KERAS, "tf_keras")
