"""The collectives that move data without reducing it: allgather, grouped_allgather,
alltoall, barrier, join and broadcast. tfring/collectives.py exports them with the
reductions; tfring/_ops/adasum.py builds on alltoall, which is why they live below it.
"""

import tensorflow as tf

from tfring._process import library
from tfring._ops import xla
from tfring._ops import naming
from tfring._process import runtime
from tfring._ops.op_support import (GATHERABLE, as_tensor, check_dtype, check_not_scalar,
                                check_root, clean_eager_errors, run_op, set_size)
from tfring._ops.process_sets import global_process_set


@clean_eager_errors
def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Concatenates every rank's tensor along the first dimension, in rank order.

    The first dimension may differ between ranks; the others must agree.

    Returns:
        A tensor whose first dimension is the sum of every rank's.
    """
    tensor = as_tensor(tensor)
    naming_ = naming.op_naming("allgather", name, tensor, ignore_name_scope)
    check_dtype(tensor, GATHERABLE, "allgather", naming_.display)
    check_not_scalar(tensor, "allgather", naming_.display)
    return run_op("tfring_allgather", naming_, tensor,
                   **process_set._op_kwargs("tfring.allgather"))


@clean_eager_errors
def grouped_allgather(tensors, name=None, ignore_name_scope=False,
                      process_set=global_process_set):
    """Allgathers a list of tensors submitted together, so they travel fused.

    Args and Returns: as `allgather`, for each tensor of the list (dtypes may differ).
    """
    tensors = [as_tensor(t) for t in tensors]
    if not tensors:
        return []
    naming_ = naming.op_naming("grouped_allgather", name, tensors, ignore_name_scope)
    for i, t in enumerate(tensors):
        display = naming.part_display(naming_.display, i, len(tensors))
        check_dtype(t, GATHERABLE, "grouped_allgather", display)
        check_not_scalar(t, "grouped_allgather", display)
    return run_op("tfring_grouped_allgather", naming_, tensors,
                   **process_set._op_kwargs("tfring.grouped_allgather"))


@clean_eager_errors
def alltoall(tensor, splits=None, name=None, ignore_name_scope=False,
             process_set=global_process_set):
    """Sends rows of `tensor` to every rank; returns what every rank sent this one.

    Args:
        tensor: rows (first dimension) to scatter; the other dimensions must agree.
        splits: how many rows go to each rank, in rank order (a list or 1-D integer tensor
            of one value per rank of the set, adding up to the first dimension). None:
            equal parts, which needs the first dimension to be divisible by the set's size.
        name: the name that pairs this tensor across ranks.

    Returns:
        With `splits`: (received, received_splits), the rows every rank sent here, in rank
        order, and how many came from each (int32). Without: `received` alone. As Horovod.

    Raises:
        tf.errors.InvalidArgumentError: splits that do not fit the tensor or the set, or
            rows that do not divide evenly when splits is None.
    """
    tensor = as_tensor(tensor)
    splits_given = splits is not None
    if splits is None:
        if tensor.shape.rank and tensor.shape[0] is not None and runtime.is_initialized() and \
                tensor.shape[0] % process_set.size() != 0:
            raise tf.errors.InvalidArgumentError(
                None, None, f"alltoall: {tensor.shape[0]} rows do not split evenly over "
                f"{process_set.size()} ranks; pass splits=")
        rows = tf.shape(tensor, out_type=tf.int64)[:1]
        size = tf.cast(set_size(process_set), tf.int64)
        # Rows unknown until the graph runs that do not divide evenly give splits that do
        # not add up: the kernel then fails the call with InvalidArgumentError.
        splits = tf.fill(tf.reshape(size, [1]), rows[0] // size)
    naming_ = naming.op_naming("alltoall", name, tensor, ignore_name_scope)
    check_dtype(tensor, GATHERABLE, "alltoall", naming_.display)
    check_not_scalar(tensor, "alltoall", naming_.display)
    received, received_splits = run_op(
        "tfring_alltoall", naming_, tensor, tf.cast(tf.convert_to_tensor(splits), tf.int64),
        **process_set._op_kwargs("tfring.alltoall"))
    if not splits_given:
        return received
    return received, tf.cast(received_splits, tf.int32)


@clean_eager_errors
def barrier(name=None, process_set=global_process_set):
    """Blocks until every rank (of the process set) has called `barrier` (with the same name).

    Returns None, except in a TF1 graph, where it returns the op to run (inside tf.function
    the op runs in program order by itself).
    """
    naming_ = naming.op_naming("barrier", name)
    op = run_op("tfring_barrier", naming_, cacheable=naming_.cacheable,
                 **process_set._op_kwargs("tfring.barrier"))
    return None if tf.executing_eagerly() or tf.inside_function() else op


@clean_eager_errors
def join():
    """Tells the other ranks that this one has run out of data; returns once every rank has.

    Until then this rank takes part in the others' collectives without data of its own: it
    contributes zeros to their sums (the identity of Min, Max and Product to those), and
    an Average divides by the ranks that had data only; it adds no rows to an allgather.
    The other ranks go on as if it had submitted every op they run. A broadcast from a
    joined root, an alltoall, and (in this version) a GPU tensor fail while a rank is
    joined. A joined rank submits nothing more until every rank has joined (in a graph,
    give join() control dependencies on the step's collectives).

    Returns:
        The last rank to join, as a scalar int32 tensor (as Horovod; `int()` of it in eager
        mode): the one that ran longest, to broadcast the final state from.
    """
    if not tf.executing_eagerly():
        xla.check_op("tfring_join", "join")
    return library.ops().tfring_join(eager=tf.executing_eagerly())


@clean_eager_errors
def broadcast(tensor, root_rank, name=None, ignore_name_scope=False,
              process_set=global_process_set):
    """Returns root_rank's value of `tensor` on every rank (of the process set; root_rank is
    a global rank, a member of the set)."""
    tensor = as_tensor(tensor)
    naming_ = naming.op_naming("broadcast", name, tensor, ignore_name_scope)
    check_dtype(tensor, GATHERABLE, "broadcast", naming_.display)
    check_root(root_rank, process_set)
    return run_op("tfring_broadcast", naming_, tensor, root_rank=root_rank,
                   cacheable=naming_.cacheable, **process_set._op_kwargs("tfring.broadcast"))
