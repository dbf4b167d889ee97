"""Adasum: Horovod's adaptive summation of gradients (op=tfring.Adasum).

Adasum of two vectors a and b is

    (1 - a.b / (2 |a|^2)) a  +  (1 - a.b / (2 |b|^2)) b

(a coefficient is 1 where its vector is zero): orthogonal vectors are summed, equal vectors
averaged, so a large learning rate tolerates more ranks than a plain sum does. Over 2^k ranks
it is applied as a binary tree, as Horovod's reference defines it: at level l, each rank
combines its running value with that of the member whose position differs in bit l, the
lower position's value as `a`. After the last level every rank holds the same result.

Each tensor of a group has its own coefficients (a layer's gradient is one vector, as in
Horovod), but a group travels together: at each level one alltoall per dtype carries every
tensor of that dtype, flattened into one row, to the partner. The row's length is checked
across ranks by the alltoall's negotiation, so ranks whose tensors differ in size get an
error instead of a wrong result. Dot products and the combination are computed in float64
and the result stored in the tensor's dtype after every level; both partners compute from
the same inputs in the same order, so they keep identical values.

Each rank sends its whole tensor log2(n) times (Horovod's vector-halving scheme sends about
twice the tensor in all): Adasum here is for correctness at the scale of a few hosts, not a
bandwidth-optimal path. It needs a power-of-two number of ranks in the set (Horovod's rule
and error), floating-point tensors, and no rank joined (an alltoall cannot run without data
from every rank).
"""

import tensorflow as tf

from tfring._ops import naming
from tfring._ops.data_movement import alltoall
from tfring._ops.horovod_util import check_num_rank_power_of_2
from tfring._ops.process_sets import global_process_set

_FLOATS = (tf.float16, tf.bfloat16, tf.float32, tf.float64)


def check_supported(tensors, what, display):
    """Raises for what Adasum cannot reduce: sparse gradients (Horovod's error type and
    advice) and non-floating-point tensors."""
    for i, t in enumerate(tensors):
        if isinstance(t, tf.IndexedSlices):
            raise NotImplementedError(
                "The Adasum reduction does not support tf.IndexedSlices (sparse gradients); "
                "pass sparse_as_dense=True to the DistributedOptimizer or "
                "DistributedGradientTape.")
        if t.dtype not in _FLOATS:
            label = naming.part_display(display, i, len(tensors))
            raise TypeError(f"tfring.{what} with op=Adasum takes floating-point tensors only "
                            f"(float16, bfloat16, float32, float64); tensor '{label}' is "
                            f"{t.dtype.name}.")


def _pair(a, b):
    """Adasum of one tensor's two values, in float64. Plain reductions (not segment sums,
    which use atomics on GPUs): both partners compute the same bits from the same inputs."""
    a, b = tf.cast(a, tf.float64), tf.cast(b, tf.float64)
    dot, a_norm, b_norm = tf.reduce_sum(a * b), tf.reduce_sum(a * a), tf.reduce_sum(b * b)
    # divide_no_nan gives 0 for a zero vector: its coefficient stays 1, as in Horovod.
    a_coeff = 1.0 - 0.5 * tf.math.divide_no_nan(dot, a_norm)
    b_coeff = 1.0 - 0.5 * tf.math.divide_no_nan(dot, b_norm)
    return a_coeff * a + b_coeff * b


def _reduce_same_dtype(tensors, position, set_size, name, ignore_name_scope, process_set):
    """Adasum of tensors that share a dtype, packed into one row per level."""
    dtype = tensors[0].dtype
    sizes = tf.stack([tf.size(t, out_type=tf.int64) for t in tensors])
    row = tf.concat([tf.reshape(t, [-1]) for t in tensors], 0)
    level, distance = 0, 1
    while distance < set_size:
        partner = position ^ distance
        splits = [1 if r == partner else 0 for r in range(set_size)]
        # One row of shape [1, length] to the partner, none to the others: the negotiation
        # checks that every rank's length agrees.
        received, _ = alltoall(
            tf.reshape(row, [1, -1]), splits=splits,
            name=naming.sub_name(name, f"adasum{level}.{dtype.name}"),
            ignore_name_scope=ignore_name_scope, process_set=process_set)
        theirs = tf.reshape(received, [-1])
        lower, upper = (row, theirs) if position < partner else (theirs, row)
        parts = zip(tf.split(lower, sizes, num=len(tensors)),
                    tf.split(upper, sizes, num=len(tensors)))
        row = tf.cast(tf.concat([_pair(a, b) for a, b in parts], 0), dtype)
        level, distance = level + 1, distance * 2
    parts = tf.split(row, sizes, num=len(tensors))
    return [tf.reshape(p, tf.shape(t)) for p, t in zip(parts, tensors)]


def _reduce(tensors, name, ignore_name_scope, process_set):
    set_size = process_set.size()
    if set_size == 1:
        return [tf.identity(t) for t in tensors]
    if not check_num_rank_power_of_2(set_size):
        raise NotImplementedError(
            f"Running Adasum with non-power of 2 ranks is not supported (Horovod's rule): "
            f"the process set has {set_size} ranks.")
    position = process_set.rank()
    by_dtype = {}
    for i, t in enumerate(tensors):
        by_dtype.setdefault(t.dtype, []).append(i)
    out = [None] * len(tensors)
    for dtype, indices in by_dtype.items():
        reduced = _reduce_same_dtype([tensors[i] for i in indices], position, set_size,
                                     name, ignore_name_scope, process_set)
        for i, r in zip(indices, reduced):
            out[i] = r
    return out


def adasum(tensors, name=None, ignore_name_scope=False, process_set=None,
           prescale_factor=1.0, postscale_factor=1.0):
    """Adasum of each dense floating-point tensor of `tensors` over the ranks of
    `process_set` (see the module doc). Its gradient is the Adasum of the gradients, as
    Horovod defines it for allreduce(op=Adasum)."""
    process_set = process_set or global_process_set
    process_set._op_kwargs("tfring.allreduce")  # checks membership before anything is sent

    @tf.custom_gradient
    def reduce(*inputs):
        scaled = [t * tf.cast(prescale_factor, t.dtype) if prescale_factor != 1.0 else t
                  for t in inputs]
        result = _reduce(scaled, name, ignore_name_scope, process_set)
        result = [r * tf.cast(postscale_factor, r.dtype) if postscale_factor != 1.0 else r
                  for r in result]

        def grad(*upstream):
            return adasum([tf.convert_to_tensor(g) for g in upstream],
                          name=naming.sub_name(name, "grad"), process_set=process_set,
                          prescale_factor=prescale_factor, postscale_factor=postscale_factor)
        return result, grad

    return list(reduce(*tensors))
