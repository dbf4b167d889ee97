"""Collective operations on tensors, as Horovod's module of them (horovod.tensorflow.mpi_ops):
allreduce, grouped_allreduce, allgather, grouped_allgather, reducescatter,
grouped_reducescatter, alltoall, broadcast, barrier, join, and the reduce ops.

Each works in eager mode, inside tf.function and in TF1 graphs, and has a gradient. The data
goes from the op's C++ kernel to the runtime and MPI without passing through Python. Each
takes `process_set=` (tfring.ProcessSet) to run among a subset of the ranks, and is named as
tfring/_ops/naming.py says. They are made in tfring/_ops: the reductions in reductions.py,
the ops that move data in data_movement.py.
"""

from tfring._ops.data_movement import (  # noqa: F401
    allgather, alltoall, barrier, broadcast, grouped_allgather, join)
from tfring._ops.op_support import Adasum, Average, Max, Min, Product, Sum  # noqa: F401
from tfring._ops.reductions import (  # noqa: F401
    allreduce, grouped_allreduce, grouped_reducescatter, reducescatter)
