"""init(comm=...) with a list of ranks and with an mpi4py communicator, and mpi4py beside
tfring in one script: each a fresh mpirun job (tests/jobs/_comm_jobs.py)."""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MPIRUN = os.path.join(os.path.dirname(sys.executable), "mpirun")


def run_job(scenario, np_, timeout=120):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               TF_CPP_MIN_LOG_LEVEL="3", TFRING_STALL_SHUTDOWN_TIME_SECONDS="60")
    proc = subprocess.run([MPIRUN, "--oversubscribe", "-np", str(np_), sys.executable,
                           os.path.join(HERE, "_comm_jobs.py"), scenario],
                          capture_output=True, text=True, timeout=timeout, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    return out


def test_comm_as_a_list_of_world_ranks():
    out = run_job("ranks_list", 3)
    # World rank 2 is tfring rank 0: the list's order is the ranks' order.
    assert "world 2: tfring rank 0 of 2, sum 2.0, gathered [2, 0]" in out, out
    assert "world 0: tfring rank 1 of 2, sum 2.0, gathered [2, 0]" in out, out
    assert "world 1: refused: tfring.init() failed: init(comm=[2, 0]): this process " \
           "(MPI_COMM_WORLD rank 1) is not one of those ranks" in out, out
    assert "world 0: mpi4py got 'hello from 1'" in out, out


def test_comm_from_mpi4py_gives_independent_jobs():
    out = run_job("mpi4py_split", 4)
    # Group 0 is world ranks 0 and 2 (3 + 2*2 = sum of ME + step at step 2), group 1 is 1, 3.
    for me, group, rank, total, root in ((0, 0, 0, 6.0, 2), (2, 0, 1, 6.0, 2),
                                         (1, 1, 0, 8.0, 3), (3, 1, 1, 8.0, 3)):
        line = f"world {me}: group {group}: tfring rank {rank} of 2, sum {total}, root's {root}"
        assert line in out, out


def test_mpi4py_and_tfring_interleaved_in_one_script():
    out = run_job("together", 2)
    assert "world 0: interleaved ok" in out and "world 1: interleaved ok" in out, out
