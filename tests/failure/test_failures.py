"""Failure scenarios, each in a fresh `mpirun -np 2`: every surviving rank must end in time
with the documented error naming the tensor and the ranks. Nothing may hang."""

import os
import re
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
MPIRUN = os.path.join(os.path.dirname(sys.executable), "mpirun")


def run_scenario(name, env=None, timeout=90, mpirun_options=(), ranks=2, script="scenarios.py"):
    full_env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                    TF_CPP_MIN_LOG_LEVEL="3", **(env or {}))
    start = time.time()
    proc = subprocess.run([MPIRUN, *mpirun_options, "--oversubscribe", "-np", str(ranks),
                           sys.executable,
                           os.path.join(HERE, script), name],
                          capture_output=True, text=True, timeout=timeout, env=full_env)
    return proc.returncode, proc.stdout + proc.stderr, time.time() - start


def test_shape_mismatch_fails_on_every_rank_with_names():
    rc, out, _ = run_scenario("mismatch")
    assert rc == 0, out
    message = ("Mismatched shapes for tensor 'grad/dense_1': rank 0 sent [2,3], "
               "rank 1 sent [3,3]")
    assert f"rank 0: caught {message}" in out, out
    assert f"rank 1: caught {message}" in out, out
    assert "rank 0: after 2.0" in out and "rank 1: after 2.0" in out, out


def test_killed_rank_ends_the_job_within_a_minute():
    rc, out, _ = run_scenario("killed_rank")
    ended = time.time()
    assert rc != 0, out
    killed = re.search(r"rank 1: killing myself at ([0-9.]+)", out)
    assert killed, out
    # Timed from the kill (the start-up and TF import are not the job's to answer for).
    assert ended - float(killed.group(1)) < 60, out
    # mpirun's own report names the rank that died and how (the scenario's line does not).
    report = " ".join(out.split())
    assert re.search(r"process rank 1 with PID \d+ on node \S+ exited on signal 9", report), out


def test_gpu_failure_notice_names_a_killed_rank_under_ulfm():
    # The notice the GPU path polls while it waits on the device (core/failure_notice.h):
    # when a rank is killed, MPI's word of it (ULFM) must reach the survivors' notice at once,
    # naming the rank, so that a NCCL collective need not wait out the peer timeout. Native,
    # at 3 ranks: the last one dies. (The NCCL side runs on a GPU: tools/gpu_checks.sh.)
    binary = os.path.join(HERE, "..", "..", "build", "tests", "scenario_peer_killed")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    proc = subprocess.run([MPIRUN, "--with-ft", "ulfm", "--oversubscribe", "-np", "3", binary],
                          capture_output=True, text=True, timeout=60, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    for rank in (0, 1):
        heard = re.search(rf"rank {rank} heard after ([0-9.]+) s: (.*)", out)
        assert heard, out
        assert float(heard.group(1)) < 5, out
        assert "UNAVAILABLE: rank 2 died" in heard.group(2), out
    assert "1 passed, 0 failed" in out, out


@pytest.mark.parametrize("scenario", ["killed_rank", "killed_rank_then_late_op"])
def test_killed_rank_is_named_in_the_survivors_error_under_ulfm(scenario):
    # With MPI's fault tolerance on (`mpirun --with-ft ulfm`), mpirun does not kill the job
    # when rank 1 dies: rank 0 must itself fail its op, naming the dead rank and the tensor,
    # at once (MPI reports the failure; no timeout is involved). The op may be pending when
    # the failure is found, or submitted after tfring has stopped: both name the tensor.
    rc, out, _ = run_scenario(scenario, mpirun_options=("--with-ft", "ulfm"))
    assert rc != 0, out
    caught = re.search(r"rank 0: caught after ([0-9.]+) s: (.*)", out)
    assert caught, out
    assert float(caught.group(1)) < 10, out
    assert "rank 0 lost its peer rank 1" in caught.group(2), out
    assert "MPI reports that process failed" in caught.group(2) and "'never_completes'" in caught.group(2)


def test_survivors_start_tfring_again_on_the_ranks_left_under_ulfm():
    # The runtime can be made again in the same process after a peer died (elastic
    # training's first need): not on MPI_COMM_WORLD, which still holds the dead rank (a clear
    # refusal), but on the communicator ULFM's shrink makes of the ranks left.
    _, out, _ = run_scenario("reinit_after_killed_rank", ranks=3,
                             mpirun_options=("--with-ft", "ulfm"))
    assert re.search(r"rank 2: killing myself", out), out
    for rank in (0, 1):
        assert re.search(rf"rank {rank}: caught (UnavailableError|AbortedError)", out), out
        refused = re.search(rf"rank {rank}: refused: (.*)", out)
        assert refused and "init(comm=...)" in refused.group(1), out
        # The ranks left, renumbered: 0 and 1 of 2, summing their own values 1 and 2.
        assert re.search(rf"rank {rank}: re-formed as rank {rank} of 2 in [0-9.]+ s: sum 3.0",
                         out), out


def _elastic_survivors(scenario, finished, env=None):
    """Runs an elastic scenario at 3 ranks under ULFM (rank 2 is killed mid-training), checks
    that the survivors' weights match numpy's replay and each other; returns the output."""
    _, out, _ = run_scenario(scenario, ranks=3, timeout=180, script="elastic_scenarios.py",
                             mpirun_options=("--with-ft", "ulfm"), env=env)
    assert re.search(r"rank 2: killing myself", out), out
    _assert_two_survivors_agree(out, finished, "[2]")
    return out


def _assert_two_survivors_agree(out, finished, sizes):
    """Ranks 0 and 1 of 2 finished as `finished` says, their resets saw `sizes`, their
    weights match numpy's replay and each other's."""
    weights = []
    for rank in (0, 1):
        done = re.search(rf"rank {rank}: finished at {finished} as rank {rank} of 2, resets saw "
                         rf"sizes {re.escape(sizes)}, matches numpy: True, weights (.*)", out)
        assert done, out
        weights.append(done.group(1))
    assert weights[0] == weights[1], out


def test_elastic_run_finishes_on_the_ranks_left_with_the_same_weights():
    # Horovod's elastic pattern (tfring.elastic): a worker killed mid-training; the others
    # roll back to their last commit, re-form, and finish with weights that match numpy's
    # run of the same schedule (3 workers for batches 0-7, then 2) and each other.
    out = _elastic_survivors("elastic_custom_loop", finished="epoch - batch 20")
    # A process set made before the reset names ranks of the old numbering: refused.
    for rank in (0, 1):
        assert (f"rank {rank}: old process set refused: tfring.allreduce: process set [0, 1] "
                "was made before the job lost a worker") in out, out


@pytest.mark.parametrize("legacy", ["0", "1"], ids=["keras3", "tf_keras"])
def test_keras_elastic_fit_finishes_on_the_ranks_left_with_the_same_weights(legacy):
    # tfring.keras.elastic as Horovod's Keras example uses it: KerasState, the commit, batch
    # and epoch callbacks, a reset callback scaling the learning rate, model.fit in @run.
    out = _elastic_survivors("keras_fit", finished="epoch 3 batch 0",
                             env={"TF_USE_LEGACY_KERAS": legacy})
    assert f"rank 0: runs {'tf_keras' if legacy == '1' else 'Keras 3'}" in out, out


def test_tf1_session_elastic_run_finishes_on_the_ranks_left_with_the_same_weights():
    # TensorFlowState over a TF1 graph's variables and session, with the TF1
    # DistributedOptimizer: the same schedule and checks as the custom loop above.
    _elastic_survivors("tf1_session", finished="epoch - batch 20")


def _tfringrun_elastic(flags, scenario, ranks):
    tfringrun = os.path.join(os.path.dirname(sys.executable), "tfringrun")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    start = time.time()
    proc = subprocess.run([tfringrun, "-np", str(ranks), *flags, sys.executable,
                           os.path.join(HERE, "elastic_scenarios.py"), scenario],
                          capture_output=True, text=True, timeout=180, env=env)
    return proc.returncode, proc.stdout + proc.stderr, time.time() - start


def _two_kills(flags):
    """4 workers; the one started as rank 3 dies at batch 4, then rank 2 at batch 8. Returns
    mpirun's status and the output, after checking that the first reset re-formed the job
    at 3 on every survivor."""
    rc, out, _ = _tfringrun_elastic(flags, "elastic_two_kills", ranks=4)
    assert re.search(r"rank 3: killing myself", out), out
    for rank in (0, 1, 2):
        assert f"rank {rank}: reset at batch 4: now rank {rank} of 3" in out, out
    assert re.search(r"rank 2: killing myself", out), out
    return rc, out


def test_tfringrun_min_np_stops_every_survivor_with_the_counts():
    # tfringrun --min-np turns on MPI's fault tolerance and passes the floor on: 4 workers
    # with --min-np 3 go on at 3 after the first loss, and the second stops both survivors,
    # each saying how many are left and how many are needed.
    rc, out = _two_kills(["--min-np", "3"])
    assert rc != 0, out
    assert out.count("2 worker(s) are left and --min-np needs 3; the job cannot go on") >= 2, out
    assert "finished at" not in out, out


def test_tfringrun_reset_limit_allows_that_many_resets_then_stops():
    # Repeated kills up to --reset-limit 1: the first reset goes through, the second loss
    # stops the 2 left, saying why. (The elastic tests above finish after a reset.)
    rc, out = _two_kills(["--reset-limit", "1"])
    assert rc != 0, out
    message = "after 1 reset(s), and --reset-limit 1 allows no more; the job stops here"
    assert out.count(message) >= 2, out
    assert "finished at" not in out, out


def test_rank_that_never_submits_fails_every_rank_after_stall_shutdown_time():
    rc, out, elapsed = run_scenario("never_submits", env={
        "TFRING_STALL_CHECK_TIME_SECONDS": "1", "TFRING_STALL_SHUTDOWN_TIME_SECONDS": "3"})
    assert rc == 0, out
    assert elapsed < 60, out
    # Rank 0 warned first, naming the tensor and the missing rank ...
    assert "Stalled collectives" in out and "'lonely' (submitted by ranks [0], missing on " \
                                            "ranks [1]" in out, out
    # ... then every rank's pending or later ops fail with the stall message.
    assert "rank 0: caught tfring stopped because tensors stalled" in out, out
    assert "'lonely'" in out.split("rank 0: caught")[1], out
    assert "rank 1: caught tfring stopped because tensors stalled" in out, out


def test_an_extra_unnamed_call_fails_at_once_and_later_calls_pair_again():
    # The default stall settings (600 s): the drift is found without them.
    rc, out, elapsed = run_scenario("extra_unnamed_call")
    assert rc == 0, out
    assert elapsed < 60, out
    drift = ("The ranks' calls have drifted apart and wait on each other: rank 0 waits in "
             "allreduce 'unnamed.1' (an unnamed call at scenarios.py:")
    for rank in (0, 1):
        line = next(l for l in out.splitlines() if l.startswith(f"rank {rank}: caught after"))
        assert drift in line and "rank 1 waits in allreduce 'named_elsewhere'" in line, out
        assert int(line.split("caught after ")[1].split(" s")[0]) < 10, line
        # Later unnamed calls pair again: i + rank summed over ranks 0 and 1.
        then = [l for l in out.splitlines() if l.startswith(f"rank {rank}: then")]
        assert then == [f"rank {rank}: then {2 * i + 1}" for i in range(3)], out


def test_unresponsive_peer_is_detected_by_peer_timeout():
    rc, out, elapsed = run_scenario("peer_timeout", env={"TFRING_PEER_TIMEOUT_SECONDS": "3"})
    assert rc != 0, out
    assert elapsed < 60, out
    assert "rank 0: caught after" in out, out
    assert "got no answer from its peer ranks for 3 s (TFRING_PEER_TIMEOUT_SECONDS)" in out, out
