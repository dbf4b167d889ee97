"""Collective operations on tensors: allreduce, grouped_allreduce, allgather,
grouped_allgather, reducescatter, grouped_reducescatter, alltoall, broadcast, broadcast_,
barrier, join.

Each works in eager mode, inside tf.function and in TF1 graphs, and has a gradient. The data
goes from the op's C++ kernel to the runtime and MPI without passing through Python. Each
takes `process_set=` (tfring.ProcessSet) to run among a subset of the ranks.
"""

import functools
import pickle
import re

import numpy as np
import tensorflow as tf

from tfring import _library, naming, runtime
from tfring.process_sets import from_attr, global_process_set

# Reduction ops, Horovod's names and values (kernels/common/types.h ReduceOp).
Average = 0
Sum = 1
Min = 3
Max = 4
Product = 5
_OP_NAMES = {Average: "Average", Sum: "Sum", Min: "Min", Max: "Max", Product: "Product"}

_REDUCIBLE = (tf.uint8, tf.int8, tf.int32, tf.int64, tf.float16, tf.bfloat16, tf.float32,
              tf.float64)
_GATHERABLE = _REDUCIBLE + (tf.bool,)


_EAGER_NOISE = re.compile(r"^\{\{function_node [^}]*\}\}\s*|\s*\[Op:\w+\]( name: \S*)?\s*$")


def _clean_eager_errors(fn):
    """Eager op errors carry TF's "{{function_node ...}} ... [Op:X]" wrapping; the runtime's
    message (tensor, problem, ranks) is what a user needs, so re-raise with that alone."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except tf.errors.OpError as e:
            cleaned = _EAGER_NOISE.sub("", e.message)
            if cleaned == e.message:
                raise
            raise type(e)(e.node_def, e.op, cleaned) from None
    return wrapper


_REDUCIBLE_ENUMS = frozenset(d.as_datatype_enum for d in _REDUCIBLE)
_GATHERABLE_ENUMS = frozenset(d.as_datatype_enum for d in _GATHERABLE)


def _check_dtype(tensor, allowed, what, name):
    enums = _REDUCIBLE_ENUMS if allowed is _REDUCIBLE else _GATHERABLE_ENUMS
    if tensor.dtype.as_datatype_enum not in enums:
        names = ", ".join(d.name for d in allowed)
        raise TypeError(f"tfring.{what} does not support dtype {tensor.dtype.name} (tensor "
                        f"'{name}'). Supported dtypes: {names}.")


def _resolve_op(average, op):
    if average is not None:
        if op is not None:
            raise ValueError("Pass either `op` or the older `average`, not both.")
        return Average if average else Sum
    op = Average if op is None else op
    if op not in _OP_NAMES:
        raise ValueError(f"`op` must be one of tfring.Average, Sum, Min, Max, Product. "
                         f"Received: op={op!r}")
    return op


def _check_root(root_rank, process_set=global_process_set):
    if not runtime.is_initialized():
        return
    if not 0 <= root_rank < runtime.size():
        raise ValueError(f"`root_rank` must be in [0, size) = [0, {runtime.size()}). "
                         f"Received: root_rank={root_rank}")
    if root_rank not in process_set.ranks:
        raise ValueError(f"`root_rank` {root_rank} is not in the process set "
                         f"{process_set.ranks}.")


def _set_size(process_set):
    """The set's size as a tensor (works in graphs built before init for all ranks)."""
    if process_set is global_process_set:
        return runtime.size_op()
    return tf.constant(process_set.size(), tf.int32)


@_clean_eager_errors
def allreduce(tensor, average=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
              name=None, process_set=global_process_set):
    """Reduces a tensor over all ranks; every rank gets the result.

    Args:
        tensor: a tf.Tensor, variable, or array-like; or a tf.IndexedSlices, whose values and
            indices are then allgathered (values divided by size() for Average).
        average: deprecated alias: True for op=Average, False for op=Sum.
        op: tfring.Average (default), Sum, Min, Max or Product. Average of an integer
            tensor is the floor of the mean.
        prescale_factor: multiplies the input before the reduction (floating point only).
        postscale_factor: multiplies the result (floating point only).
        name: the name that pairs this tensor across ranks (see tfring.naming).
        process_set: the ranks that take part (tfring.ProcessSet); default all.

    Returns:
        A tensor of the same shape and dtype.

    Example:
        >>> total = tfring.allreduce(tf.constant([1.0, 2.0]), op=tfring.Sum, name="x")
    """
    op = _resolve_op(average, op)
    if isinstance(tensor, tf.IndexedSlices):
        return _allreduce_indexed_slices(tensor, op, name, process_set)
    tensor = tf.convert_to_tensor(tensor)
    tensor_name, cacheable = naming.tensor_name("allreduce", name)
    _check_dtype(tensor, _REDUCIBLE, "allreduce", tensor_name)
    return _library.ops().tfring_allreduce(
        tensor, reduce_op=op, prescale_factor=prescale_factor, postscale_factor=postscale_factor,
        tensor_name=tensor_name, cacheable=cacheable, eager=tf.executing_eagerly(),
        **process_set._op_kwargs("tfring.allreduce"))


def _allreduce_indexed_slices(slices, op, name, process_set):
    if op not in (Average, Sum):
        raise ValueError("allreduce of tf.IndexedSlices supports op=Average and Sum only.")
    base = name if name is not None else naming.tensor_name("allreduce_sparse")[0]
    values = allgather(slices.values, name=f"{base}.values", process_set=process_set)
    indices = allgather(slices.indices, name=f"{base}.indices", process_set=process_set)
    if op == Average:
        values = values / tf.cast(_set_size(process_set), values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


@_clean_eager_errors
def grouped_allreduce(tensors, average=None, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, name=None, process_set=global_process_set):
    """Allreduces a list of tensors submitted together, so they travel fused.

    Args and Returns: as `allreduce`, for each tensor of the list (dtypes may differ).
    """
    op = _resolve_op(average, op)
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    if not tensors:
        return []
    tensor_name, cacheable = naming.tensor_name("grouped_allreduce", name)
    for i, t in enumerate(tensors):
        _check_dtype(t, _REDUCIBLE, "grouped_allreduce", f"{tensor_name}.{i}")
    return _library.ops().tfring_grouped_allreduce(
        tensors, reduce_op=op, prescale_factor=prescale_factor,
        postscale_factor=postscale_factor, tensor_name=tensor_name, cacheable=cacheable,
        eager=tf.executing_eagerly(), **process_set._op_kwargs("tfring.grouped_allreduce"))


@_clean_eager_errors
def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's tensor along the first dimension, in rank order.

    The first dimension may differ between ranks; the others must agree.

    Returns:
        A tensor whose first dimension is the sum of every rank's.
    """
    tensor = tf.convert_to_tensor(tensor)
    tensor_name, _ = naming.tensor_name("allgather", name)
    _check_dtype(tensor, _GATHERABLE, "allgather", tensor_name)
    if tensor.shape.rank == 0:
        raise ValueError(f"allgather needs a tensor of rank >= 1; '{tensor_name}' is a scalar. "
                         "Reshape it to [1] first.")
    return _library.ops().tfring_allgather(tensor, tensor_name=tensor_name,
                                           eager=tf.executing_eagerly(),
                                           **process_set._op_kwargs("tfring.allgather"))


@_clean_eager_errors
def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Allgathers a list of tensors submitted together, so they travel fused.

    Args and Returns: as `allgather`, for each tensor of the list (dtypes may differ).
    """
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    if not tensors:
        return []
    tensor_name, _ = naming.tensor_name("grouped_allgather", name)
    for i, t in enumerate(tensors):
        _check_dtype(t, _GATHERABLE, "grouped_allgather", f"{tensor_name}.{i}")
        if t.shape.rank == 0:
            raise ValueError(f"grouped_allgather needs tensors of rank >= 1; "
                             f"'{tensor_name}.{i}' is a scalar. Reshape it to [1] first.")
    return _library.ops().tfring_grouped_allgather(
        tensors, tensor_name=tensor_name, eager=tf.executing_eagerly(),
        **process_set._op_kwargs("tfring.grouped_allgather"))


@_clean_eager_errors
def reducescatter(tensor, op=Average, prescale_factor=1.0, postscale_factor=1.0, name=None,
                  process_set=global_process_set):
    """Reduces a tensor over all ranks; rank r gets its block of the first dimension.

    The first dimension (the same on every rank) is split as evenly as possible, the lower
    ranks taking one row more when it does not divide: 7 rows over 3 ranks give 3, 2, 2.

    Args: as `allreduce` (op: Average, Sum, Min, Max or Product).

    Returns:
        This rank's block of the reduced tensor.
    """
    op = _resolve_op(None, op)
    tensor = tf.convert_to_tensor(tensor)
    tensor_name, cacheable = naming.tensor_name("reducescatter", name)
    _check_dtype(tensor, _REDUCIBLE, "reducescatter", tensor_name)
    if tensor.shape.rank == 0:
        raise ValueError(f"reducescatter needs a tensor of rank >= 1; '{tensor_name}' is a "
                         "scalar. Reshape it to [1] first.")
    return _library.ops().tfring_reducescatter(
        tensor, reduce_op=op, prescale_factor=prescale_factor, postscale_factor=postscale_factor,
        tensor_name=tensor_name, cacheable=cacheable, eager=tf.executing_eagerly(),
        **process_set._op_kwargs("tfring.reducescatter"))


def grouped_reducescatter(tensors, op=Average, prescale_factor=1.0, postscale_factor=1.0,
                          name=None, process_set=global_process_set):
    """`reducescatter` of each tensor of a list (dtypes may differ); returns their blocks.

    Submitted together; unlike grouped_allreduce they are not fused into one backend call
    (each block layout differs), but they share the runtime's cycles.
    """
    base = name if name is not None else naming.tensor_name("grouped_reducescatter")[0]
    return [reducescatter(t, op=op, prescale_factor=prescale_factor,
                          postscale_factor=postscale_factor, name=f"{base}.{i}",
                          process_set=process_set)
            for i, t in enumerate(tensors)]


@_clean_eager_errors
def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends rows of `tensor` to every rank; returns what every rank sent this one.

    Args:
        tensor: rows (first dimension) to scatter; the other dimensions must agree.
        splits: how many rows go to each rank, in rank order (a list or 1-D integer tensor
            of size() values adding up to the first dimension). None: equal parts, which
            needs the first dimension to be divisible by size().
        name: the name that pairs this tensor across ranks.

    Returns:
        (received, received_splits): the rows every rank sent here, in rank order, and how
        many came from each (int64).
    """
    tensor = tf.convert_to_tensor(tensor)
    tensor_name, _ = naming.tensor_name("alltoall", name)
    _check_dtype(tensor, _GATHERABLE, "alltoall", tensor_name)
    if tensor.shape.rank == 0:
        raise ValueError(f"alltoall needs a tensor of rank >= 1; '{tensor_name}' is a scalar.")
    if splits is None:
        rows = tf.shape(tensor, out_type=tf.int64)[0]
        size = tf.cast(_set_size(process_set), tf.int64)
        if tensor.shape[0] is not None and runtime.is_initialized() and \
                tensor.shape[0] % process_set.size() != 0:
            raise ValueError(f"alltoall '{tensor_name}': {tensor.shape[0]} rows do not split "
                             f"evenly over {process_set.size()} ranks; pass splits=")
        splits = tf.fill([size], rows // size)
    splits = tf.cast(tf.convert_to_tensor(splits), tf.int64)
    return tuple(_library.ops().tfring_alltoall(
        tensor, splits, tensor_name=tensor_name, eager=tf.executing_eagerly(),
        **process_set._op_kwargs("tfring.alltoall")))


@_clean_eager_errors
def barrier(name=None, process_set=global_process_set):
    """Blocks until every rank (of the process set) has called `barrier` (with the same name).

    Returns None, except in a TF1 graph, where it returns the op to run (inside tf.function
    the op runs in program order by itself).
    """
    tensor_name, cacheable = naming.tensor_name("barrier", name)
    op = _library.ops().tfring_barrier(tensor_name=tensor_name, cacheable=cacheable,
                                       eager=tf.executing_eagerly(),
                                       **process_set._op_kwargs("tfring.barrier"))
    return None if tf.executing_eagerly() or tf.inside_function() else op


@_clean_eager_errors
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
        The last rank to join (an int in eager mode, a scalar int32 tensor in a graph):
        the one that ran longest, to broadcast the final state from.
    """
    out = _library.ops().tfring_join(eager=tf.executing_eagerly())
    return int(out.numpy()) if tf.executing_eagerly() else out


@_clean_eager_errors
def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns root_rank's value of `tensor` on every rank (of the process set; root_rank is
    a global rank, a member of the set)."""
    tensor = tf.convert_to_tensor(tensor)
    tensor_name, cacheable = naming.tensor_name("broadcast", name)
    _check_dtype(tensor, _GATHERABLE, "broadcast", tensor_name)
    _check_root(root_rank, process_set)
    return _library.ops().tfring_broadcast(tensor, root_rank=root_rank, tensor_name=tensor_name,
                                           cacheable=cacheable, eager=tf.executing_eagerly(),
                                           **process_set._op_kwargs("tfring.broadcast"))


def broadcast_variables(variables, root_rank, name=None, process_set=global_process_set):
    """Assigns root_rank's values to `variables` on every rank.

    In eager mode the assignment happens now; in a graph it returns the grouped assign op.
    """
    _check_root(root_rank, process_set)
    base = name if name is not None else naming.tensor_name("broadcast_variables")[0]
    assigns = [v.assign(broadcast(v, root_rank, name=f"{base}.{i}", process_set=process_set))
               for i, v in enumerate(variables)]
    return None if tf.executing_eagerly() else tf.group(*assigns)


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """In place: every variable of `variables` (one, or a list) takes root_rank's value.

    Horovod's `broadcast_`. Returns the variables (the same objects), so it composes:
    `v = tfring.broadcast_(v, 0)`. In a graph, run the returned variables' assignments
    through their `.op`s or read them under a control dependency, as with any assign.
    """
    single = isinstance(variables, tf.Variable)
    listed = [variables] if single else list(variables)
    for v in listed:
        if not isinstance(v, tf.Variable):
            raise TypeError(f"broadcast_ works in place on tf.Variable objects; got "
                            f"{type(v).__name__}. Use tfring.broadcast for tensors.")
    base = name if name is not None else naming.tensor_name("broadcast_")[0]
    _check_root(root_rank, process_set)
    for i, v in enumerate(listed):
        v.assign(broadcast(v, root_rank, name=f"{base}.{i}", process_set=process_set))
    return variables


def allgather_object(obj, name=None):
    """Returns the list of every rank's picklable `obj`, in rank order (eager mode)."""
    base = name if name is not None else naming.tensor_name("allgather_object")[0]
    payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
    sizes = allgather(tf.constant([payload.size], dtype=tf.int64), name=f"{base}.sizes").numpy()
    data = allgather(tf.constant(payload), name=f"{base}.data").numpy()
    out, offset = [], 0
    for n in sizes:
        out.append(pickle.loads(data[offset:offset + n].tobytes()))
        offset += n
    return out


def broadcast_object(obj, root_rank=0, name=None):
    """Returns root_rank's picklable `obj` on every rank (eager mode)."""
    _check_root(root_rank)
    base = name if name is not None else naming.tensor_name("broadcast_object")[0]
    is_root = runtime.rank() == root_rank
    payload = np.frombuffer(pickle.dumps(obj) if is_root else b"", dtype=np.uint8)
    size = broadcast(tf.constant([payload.size], dtype=tf.int64), root_rank,
                     name=f"{base}.size").numpy()[0]
    if not is_root:
        payload = np.zeros(size, dtype=np.uint8)
    data = broadcast(tf.constant(payload), root_rank, name=f"{base}.data").numpy()
    return pickle.loads(data.tobytes())


# Gradients. Each names its collectives through tfring.naming, like any other call.

def _differentiable_op(op, what):
    """The reduce op of a reducing op's node; only Average and Sum have a gradient."""
    reduce_op = op.get_attr("reduce_op")
    if reduce_op not in (Average, Sum):
        raise ValueError(f"tfring.{what} has a gradient for op=Average and Sum only, "
                         f"not op={_OP_NAMES[reduce_op]}.")
    return reduce_op


@tf.RegisterGradient("TfringAllreduce")
def _allreduce_grad(op, grad):
    reduce_op = _differentiable_op(op, "allreduce")
    return allreduce(grad, op=reduce_op, prescale_factor=op.get_attr("prescale_factor"),
                     postscale_factor=op.get_attr("postscale_factor"),
                     process_set=from_attr(op.get_attr("process_set")))


@tf.RegisterGradient("TfringGroupedAllreduce")
def _grouped_allreduce_grad(op, *grads):
    reduce_op = _differentiable_op(op, "grouped_allreduce")
    return grouped_allreduce(list(grads), op=reduce_op,
                             prescale_factor=op.get_attr("prescale_factor"),
                             postscale_factor=op.get_attr("postscale_factor"),
                             process_set=from_attr(op.get_attr("process_set")))


def _gathered_input_grad(my_input, grad, process_set):
    # d(loss)/d(my rows) = the sum over ranks of their upstream gradient for my rows.
    grad = allreduce(grad, op=Sum, process_set=process_set)
    my_rows = tf.shape(my_input, out_type=tf.int64)[:1]
    rows = allgather(my_rows, process_set=process_set)
    if process_set is global_process_set:
        rank = tf.cast(runtime.rank_op(), tf.int64)
    else:
        rank = tf.constant(process_set.rank(), tf.int64)
    start = tf.reduce_sum(rows[:rank])
    begin = tf.concat([[start], tf.zeros_like(tf.shape(grad, out_type=tf.int64)[1:])], 0)
    return tf.slice(grad, begin, tf.shape(my_input, out_type=tf.int64))


@tf.RegisterGradient("TfringAllgather")
def _allgather_grad(op, grad):
    return _gathered_input_grad(op.inputs[0], grad, from_attr(op.get_attr("process_set")))


@tf.RegisterGradient("TfringGroupedAllgather")
def _grouped_allgather_grad(op, *grads):
    process_set = from_attr(op.get_attr("process_set"))
    return [_gathered_input_grad(x, g, process_set) for x, g in zip(op.inputs, grads)]


@tf.RegisterGradient("TfringReducescatter")
def _reducescatter_grad(op, grad):
    # out_r = f * op(x_0, ..., x_n)[block r]; for Sum and Average each x_q[block r] gets
    # f * grad_r (f: the scale factors, and 1/size for Average): gather every rank's block.
    reduce_op = _differentiable_op(op, "reducescatter")
    process_set = from_attr(op.get_attr("process_set"))
    gathered = allgather(grad, process_set=process_set)
    factor = op.get_attr("prescale_factor") * op.get_attr("postscale_factor")
    if reduce_op == Average:
        return gathered * tf.cast(factor, gathered.dtype) / tf.cast(_set_size(process_set),
                                                                     gathered.dtype)
    return gathered * tf.cast(factor, gathered.dtype) if factor != 1.0 else gathered


@tf.RegisterGradient("TfringAlltoall")
def _alltoall_grad(op, grad, _received_splits_grad):
    # The rows I received from rank q came from q's rows sent to me: send the gradient back
    # the same way, with the received splits as the splits.
    back, _ = alltoall(grad, splits=op.outputs[1],
                       process_set=from_attr(op.get_attr("process_set")))
    return back, None


@tf.RegisterGradient("TfringBroadcast")
def _broadcast_grad(op, grad):
    # Every rank's output is the root's input: the root's gradient is the sum over ranks.
    summed = allreduce(grad, op=Sum, process_set=from_attr(op.get_attr("process_set")))
    is_root = tf.equal(runtime.rank_op(), op.get_attr("root_rank"))
    return summed * tf.cast(is_root, summed.dtype)
