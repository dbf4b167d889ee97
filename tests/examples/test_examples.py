"""Runs each example as a user would (`mpirun -np 2 python examples/X.py`) and checks what it
prints: accuracy well above chance, and identical weights where the example checks them."""

import os
import re
import subprocess
import sys


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MPIRUN = os.path.join(os.path.dirname(sys.executable), "mpirun")


def run_example(script, *args, timeout=300, folder="examples", env=None):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    proc = subprocess.run([MPIRUN, "--oversubscribe", "-np", "2", sys.executable,
                           os.path.join(ROOT, folder, script), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def accuracies(output):
    return [float(a) for a in re.findall(r"test accuracy (\d\.\d+)", output)]


def test_tf2_custom_loop():
    out = run_example("tf2_custom_loop.py", "--epochs", "2")
    assert accuracies(out)[-1] > 0.85, out
    assert "weights identical on all 2 ranks: True" in out, out


def test_tf1_monitored_session(tmp_path):
    out = run_example("tf1_monitored_session.py", "--steps", "300",
                      "--checkpoint-dir", str(tmp_path))
    assert accuracies(out)[-1] > 0.85, out
    assert any(name.startswith("model.ckpt") for name in os.listdir(tmp_path))


def test_keras_fit(tmp_path):
    out = run_example("keras_fit.py", "--epochs", "4", "--checkpoint-dir", str(tmp_path))
    assert accuracies(out)[-1] > 0.85, out
    assert "weights identical on all 2 ranks: True" in out, out
    assert "finished gradual learning rate warmup" in out, out
    assert any(name.endswith(".keras") for name in os.listdir(tmp_path))


def test_collectives_walkthrough():
    out = run_example("collectives_walkthrough.py")
    assert "OK" in out and "WRONG" not in out, out


# Horovod's synthetic benchmarks' patterns (tests/examples/_horovod_style_*.py), on tf_keras
# as a Horovod user's scripts run: with their flags --fp16-allreduce and --use-adasum. Each
# script also reports what its flags did, from the values the reduction delivered (the
# scripts' docstrings say how), so that a flag the code ignored would show.
def run_horovod_style(script, *args):
    return run_example(script, *args, folder=os.path.join("tests", "examples"),
                       env={"TF_USE_LEGACY_KERAS": "1"})


def first_update_errors(output):
    """The tf1 script's relative errors of its first update as Adasum and as Average."""
    (found,) = re.findall(r"tf1: first update, relative error as adasum (\S+), as average (\S+)",
                          output)
    return float(found[0]), float(found[1])


def test_horovod_style_tf2_tape_and_fit_with_fp16_compression():
    out = run_horovod_style("_horovod_style_tf2.py", "--fp16-allreduce")
    for pattern in ("custom loop", "fit"):
        assert f"{pattern}: identical on all ranks: True" in out, out
        assert f"{pattern}: loss fell: True" in out, out
        # The tape's reduced gradients, and fit's updates, are float16 values.
        assert f"{pattern}: float16 on the wire: True " in out, out


def test_horovod_style_tf1_session_order():
    out = run_horovod_style("_horovod_style_tf1.py")
    assert "tf1: identical on all ranks: True" in out and "tf1: loss fell: True" in out, out
    # Neither flag: float32 on the wire, and the update is the average's (the ranks' updates
    # summed, at the learning rate times the size), not Adasum's.
    assert "tf1: float16 on the wire: False " in out, out
    as_adasum, as_average = first_update_errors(out)
    assert as_average < 1e-3 and as_adasum > 1e-2, out


def test_horovod_style_tf1_session_order_with_adasum_and_fp16():
    out = run_horovod_style("_horovod_style_tf1.py", "--use-adasum", "--fp16-allreduce")
    assert "tf1: identical on all ranks: True" in out and "tf1: loss fell: True" in out, out
    # Both flags took effect: float16 values moved the weights, by the Adasum of the ranks'
    # updates (to within float16's rounding of them), far from their sum.
    assert "tf1: float16 on the wire: True " in out, out
    as_adasum, as_average = first_update_errors(out)
    assert as_adasum < 2e-3 and as_average > 1e-2, out
