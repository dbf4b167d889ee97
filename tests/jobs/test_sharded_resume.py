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


def _job(np_, env, *args):
    env = dict(env, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return _run([MPIRUN, "--oversubscribe", "-np", str(np_), sys.executable,
                 os.path.join(HERE, "_sharded_resume.py"), *map(str, args)], env)


def _assert_resumed(out, size):
    for rank in range(size):
        assert f"rank {rank}: resumed at {size} ranks, all four alike: True" in out, \
            out[-4000:]


def _assert_plain_keras_resumes_it(folder, env, flavour):
    out = _run([sys.executable, os.path.join(HERE, "_sharded_resume.py"), "without",
                str(folder)], env)
    assert (f"without tfring ({flavour}): state as unsharded: True, resumed alike: True, "
            "tfring imported: False") in out, out[-4000:]


# Two tests, so that the suite's two-at-a-time jobs stage runs the flavours side by side.
def test_keras3_saved_at_2_resumes_at_3_and_saved_at_3_at_2(tmp_path):
    at2, at3 = tmp_path / "at2", tmp_path / "at3"
    for folder in (at2, at3):
        folder.mkdir()
    out = _job(2, ENV, "save", at2)
    assert "rank 0: saved at 2 ranks" in out, out[-4000:]
    out = _job(3, ENV, "resume", at2, at3)  # then saves at 3 ranks
    _assert_resumed(out, 3)
    assert "rank 0: saved at 3 ranks" in out, out[-4000:]
    _assert_resumed(_job(2, ENV, "resume", at3), 2)
    _assert_plain_keras_resumes_it(at3, ENV, "Keras 3")


def test_tf_keras_saved_at_2_resumes_at_3(tmp_path):
    # TensorFlow checkpoints (tf_keras's save_weights without .h5), from 2 ranks to 3.
    out = _job(2, TF_KERAS, "save", tmp_path)
    assert "rank 0: saved at 2 ranks" in out, out[-4000:]
    _assert_resumed(_job(3, TF_KERAS, "resume", tmp_path), 3)
    _assert_plain_keras_resumes_it(tmp_path, TF_KERAS, "tf_keras")
