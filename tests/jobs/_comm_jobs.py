"""Jobs where tfring's world is not all of MPI_COMM_WORLD, or where the script also talks MPI
through mpi4py: `mpirun -np N python _comm_jobs.py SCENARIO`. Each rank prints what it saw;
tests/jobs/test_jobs.py checks the lines."""

import sys

from mpi4py import MPI  # initializes MPI first, as a script that uses mpi4py does

import numpy as np
import tensorflow as tf

import tfring

WORLD = MPI.COMM_WORLD
ME = WORLD.Get_rank()


def say(text):
    print(f"world {ME}: {text}", flush=True)


def ranks_list():
    # np 3: world ranks [2, 0] are tfring's job (tfring rank = position in the list); world
    # rank 1 is not in it and talks to the others through mpi4py only.
    if ME == 1:
        try:
            tfring.init(comm=[2, 0])
        except ValueError as e:
            say(f"refused: {e}")
        WORLD.send("hello from 1", dest=0, tag=5)
    else:
        tfring.init(comm=[2, 0])
        total = tfring.allreduce(tf.constant([float(ME)]), op=tfring.Sum).numpy()[0]
        order = tfring.allgather(tf.constant([ME])).numpy().tolist()
        say(f"tfring rank {tfring.rank()} of {tfring.size()}, sum {total}, gathered {order}")
        if ME == 0:
            say(f"mpi4py got {WORLD.recv(source=1, tag=5)!r}")
    WORLD.Barrier()


def mpi4py_split():
    # np 4: two independent tfring jobs of two ranks each, on communicators made by mpi4py.
    sub = WORLD.Split(color=ME % 2, key=ME)
    tfring.init(comm=sub)
    for step in range(3):
        mine = np.full(3, float(ME + step))
        via_tfring = tfring.allreduce(tf.constant(mine), op=tfring.Sum).numpy()
        via_mpi4py = sub.allreduce(mine, op=MPI.SUM)  # the script's own message, same comm
        assert np.array_equal(via_tfring, via_mpi4py), (via_tfring, via_mpi4py)
    got = tfring.broadcast(tf.constant([ME]), root_rank=1).numpy()[0]
    say(f"group {ME % 2}: tfring rank {tfring.rank()} of {tfring.size()}, "
        f"sum {via_tfring[0]}, root's {got}")
    sub.Free()


def together():
    # np 2: mpi4py for the script's objects, tfring for tensors, interleaved.
    tfring.init()
    for step in range(5):
        note = WORLD.bcast({"step": step, "from": ME} if ME == 0 else None, root=0)
        total = tfring.allreduce(tf.constant([float(step + ME)]), op=tfring.Sum).numpy()[0]
        peers = WORLD.allgather(ME * 10 + step)
        assert note == {"step": step, "from": 0} and total == 2 * step + 1, (note, total)
        assert peers == [step, 10 + step], peers
    say(f"interleaved ok, mpi threads supported {tfring.mpi_threads_supported()}")


if __name__ == "__main__":
    {"ranks_list": ranks_list, "mpi4py_split": mpi4py_split, "together": together}[sys.argv[1]]()
