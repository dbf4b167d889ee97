"""A walk through tfring's collectives on N ranks, printing what each rank gets and checking it.

    mpirun -np 2 python examples/collectives_walkthrough.py

Every rank computes the expected values itself (with numpy) and prints OK or WRONG beside
each result; the script exits non-zero if anything is wrong.
"""

import sys

import numpy as np
import tensorflow as tf

import tfring

tfring.init()
tfring.pin_gpu()  # one GPU per process, where there are GPUs (as Horovod's examples pin)
rank, size = tfring.rank(), tfring.size()
wrong = 0


def show(what, got, want):
    global wrong
    ok = np.array_equal(np.asarray(got), np.asarray(want))
    wrong += not ok
    print(f"[rank {rank}/{size}] {what:<46} {np.asarray(got).tolist()!s:<28} "
          f"{'OK' if ok else f'WRONG (expected {np.asarray(want).tolist()})'}", flush=True)


mine = tf.constant([1.0, 2.0, 3.0]) * (rank + 1)          # rank r holds (r+1) * [1, 2, 3]
all_inputs = [np.array([1.0, 2.0, 3.0]) * (r + 1) for r in range(size)]
show("my input", mine.numpy(), all_inputs[rank])
show("allreduce Sum", tfring.allreduce(mine, op=tfring.Sum, name="sum"), sum(all_inputs))
show("allreduce Average", tfring.allreduce(mine, name="avg"), sum(all_inputs) / size)
show("allreduce Max", tfring.allreduce(mine, op=tfring.Max, name="max"), np.max(all_inputs, 0))
show("allreduce float16 Sum", tfring.allreduce(tf.cast(mine, tf.float16), op=tfring.Sum,
                                               name="f16"), sum(all_inputs))
rows = tf.fill([rank + 1, 2], rank)                        # rank r holds r+1 rows of r
show("allgather (rank r sends r+1 rows)", tfring.allgather(rows, name="gather"),
     np.concatenate([np.full((r + 1, 2), r) for r in range(size)]))
show(f"broadcast from rank {size - 1}", tfring.broadcast(mine, root_rank=size - 1, name="bc"),
     all_inputs[size - 1])


@tf.function
def step(x):
    # Inside a tf.function: 8 allreduces submitted together travel fused in one MPI call.
    return tf.add_n([tfring.allreduce(x * i, op=tfring.Sum) for i in range(8)])


show("tf.function: sum of 8 fused allreduces", step(mine), sum(all_inputs) * sum(range(8)))
show("allgather_object", [o["rank"] for o in tfring.allgather_object({"rank": rank})],
     list(range(size)))
if rank == 0:
    print(f"tfring {tfring.__version__}: {size} ranks, {tfring.mpi_version()}, "
          f"{'all results correct' if not wrong else f'{wrong} WRONG'} on rank 0", flush=True)
sys.exit(1 if wrong else 0)
