"""Collective operations on tensors: allreduce, grouped_allreduce, allgather,
grouped_allgather, reducescatter, grouped_reducescatter, alltoall, broadcast, barrier, join.

Each works in eager mode, inside tf.function and in TF1 graphs, and has a gradient
(tfring/_collective_gradients.py). The data goes from the op's C++ kernel to the runtime and
MPI without passing through Python. Each takes `process_set=` (tfring.ProcessSet) to run
among a subset of the ranks, and is named as tfring/naming.py says. Signatures are
Horovod's, in Horovod's order.
"""

import contextlib
import functools
import re

import tensorflow as tf

from tfring import _eager_call, _library, _xla, adasum as _adasum, naming, runtime
from tfring.compression import Compression
from tfring.process_sets import global_process_set

# Reduction ops, Horovod's names and values (kernels/common/types.h ReduceOp).
Average = 0
Sum = 1
Adasum = 2  # computed by tfring/adasum.py from alltoalls, not by the runtime's reduce ops
Min = 3
Max = 4
Product = 5
_OP_NAMES = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max",
             Product: "Product"}

_REDUCIBLE = (tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64, tf.float16,
              tf.bfloat16, tf.float32, tf.float64)
_GATHERABLE = _REDUCIBLE + (tf.bool,)


_EagerTensor = type(tf.constant(0))  # what eager ops return (TF keeps the class private)

_EAGER_NOISE = re.compile(r"^\{\{function_node [^}]*\}\}\s*|\s*\[Op:\w+\]( name: \S*)?\s*$")


def _clean_eager_errors(fn):
    """Eager op errors carry TF's "{{function_node ...}} ... [Op:X]" wrapping; the runtime's
    message (tensor, problem, ranks) is what a user needs, so re-raise with that alone."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except tf.errors.OpError as e:
            raise _cleaned(e) from None
    return wrapper


def _cleaned(error):
    """`error` (a tf.errors.OpError) with TF's eager wrapping taken off its message: a new
    exception of its type, or `error` itself when there was none."""
    message = _EAGER_NOISE.sub("", error.message)
    return error if message == error.message else type(error)(error.node_def, error.op,
                                                                message)


_REDUCIBLE_ENUMS = frozenset(d.as_datatype_enum for d in _REDUCIBLE)
_GATHERABLE_ENUMS = frozenset(d.as_datatype_enum for d in _GATHERABLE)


def _check_dtype(tensor, allowed, what, name):
    enums = _REDUCIBLE_ENUMS if allowed is _REDUCIBLE else _GATHERABLE_ENUMS
    if tensor.dtype.as_datatype_enum not in enums:
        names = ", ".join(d.name for d in allowed)
        raise TypeError(f"tfring.{what} does not support dtype {tensor.dtype.name} (tensor "
                        f"'{name}'). Supported dtypes: {names}.")


def _run_op(op, naming_, *args, **attrs):
    """Creates (eagerly: runs) the library's op `op`, named as `naming_` (tfring.naming)
    says, and records that it exists."""
    if not tf.executing_eagerly():
        _xla.check_op(op, naming_.display)
    out = getattr(_library.ops(), op)(
        *args, tensor_name=naming_.tensor_name, call_site=naming_.call_site,
        eager=tf.executing_eagerly(), name=naming_.op_name, **attrs)
    naming.created(naming_)
    return out


def _as_tensor(value):
    """`value` as a tensor. Eagerly, a tensor is returned as it is: tf.convert_to_tensor
    would do the same, at a cost that is a sizeable part of a small eager collective. In a
    graph it converts (an eager tensor used there becomes a captured input)."""
    if isinstance(value, tf.Tensor) and tf.executing_eagerly():
        return value
    return tf.convert_to_tensor(value)


def _device(device):
    """Horovod's device_dense / device_sparse: where the op is placed ('' leaves it to TF)."""
    return tf.device(device) if device else contextlib.nullcontext()


def _resolve_op(average, op):
    if average is not None:
        if op is not None:
            raise ValueError("Pass either `op` or the older `average`, not both.")
        return Average if average else Sum
    op = Average if op is None else op
    if op not in _OP_NAMES:
        raise ValueError("`op` must be one of tfring.Average, Sum, Adasum, Min, Max, "
                         f"Product. Received: op={op!r}")
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


def allreduce(tensor, average=None, device_dense="", device_sparse="",
              compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, name=None, process_set=global_process_set,
              ignore_name_scope=False):
    """Reduces a tensor over all ranks; every rank gets the result.

    Args:
        tensor: a tf.Tensor, variable, or array-like; or a tf.IndexedSlices, whose values and
            indices are then allgathered (values divided by the set's size for Average).
        average: deprecated alias: True for op=Average, False for op=Sum.
        device_dense, device_sparse: the device for dense / IndexedSlices reductions
            ('' lets TensorFlow place them).
        compression: tfring.Compression.none or .fp16 (what travels on the wire).
        op: tfring.Average (default), Sum, Min, Max, Product, or Adasum (floating point,
            a power-of-two number of ranks; tfring/adasum.py). Average of an integer
            tensor is the mean rounded toward zero, as Horovod.
        prescale_factor: multiplies the input before the reduction (integers: in float64,
            truncated toward zero, as Horovod).
        postscale_factor: multiplies the result (the same way).
        name: the name that pairs this tensor across ranks (see tfring.naming).
        process_set: the ranks that take part (tfring.ProcessSet); default all.
        ignore_name_scope: in a graph, leave the name scope out of the derived name.

    Returns:
        A tensor of the same shape and dtype (a tf.IndexedSlices for one).

    Example:
        >>> total = tfring.allreduce(tf.constant([1.0, 2.0]), op=tfring.Sum, name="x")
    """
    # The common eager call first, with no layer around it (_eager_allreduce says why). A
    # function being traced may capture an eager tensor: it builds a graph op instead.
    if (type(tensor) is _EagerTensor and op in _EAGER_PATH_OPS and average is None and
            not device_dense and compression is Compression.none and tf.executing_eagerly()):
        return _eager_allreduce(tensor, Average if op is None else op, prescale_factor,
                                postscale_factor, name, process_set)
    return _allreduce(tensor, average, device_dense, device_sparse, compression, op,
                      prescale_factor, postscale_factor, name, process_set, ignore_name_scope)


# The ops the eager path takes (None: Average); Adasum is computed in Python (adasum.py).
_EAGER_PATH_OPS = frozenset((None, Average, Sum, Min, Max, Product))


@_clean_eager_errors
def _allreduce(tensor, average, device_dense, device_sparse, compression, op,
               prescale_factor, postscale_factor, name, process_set, ignore_name_scope):
    """allreduce's general path: graphs, tf.IndexedSlices, compression, Adasum, devices."""
    op = _resolve_op(average, op)
    if isinstance(tensor, tf.IndexedSlices):
        if prescale_factor != 1.0 or postscale_factor != 1.0:  # Horovod's rule and error type
            raise NotImplementedError("prescale_factor and postscale_factor are not supported "
                                      "with tf.IndexedSlices (scale the values yourself, or "
                                      "pass a dense tensor).")
        with _device(device_sparse):
            return _allreduce_indexed_slices(tensor, op, name, process_set, ignore_name_scope)
    with _device(device_dense):
        tensor = _as_tensor(tensor)
        sent, ctx = compression.compress(tensor)
        if op == Adasum:
            _adasum.check_supported([sent], "allreduce", name or "unnamed allreduce")
            reduced, = _adasum.adasum([sent], name, ignore_name_scope, process_set,
                                      prescale_factor, postscale_factor)
            return compression.decompress(reduced, ctx)
        naming_ = naming.op_naming("allreduce", name, sent, ignore_name_scope)
        _check_dtype(sent, _REDUCIBLE, "allreduce", naming_.display)
        reduced = _run_op("tfring_allreduce", naming_, sent, reduce_op=op,
                          prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                          cacheable=naming_.cacheable,
                          **process_set._op_kwargs("tfring.allreduce"))
        return compression.decompress(reduced, ctx)


def _eager_allreduce(tensor, op, prescale_factor, postscale_factor, name, process_set):
    """allreduce's most common call, kept short: an eager tensor, no device, compression
    or Adasum. For a small tensor the Python layer is a sizeable part of the call (each line
    after TensorFlow's op has evicted the caches costs several times what it costs alone),
    so this path does only what the general one would do for it, and runs the op through
    TensorFlow's fast path directly (tfring/_eager_call.py). Its errors are cleaned here, as
    _clean_eager_errors does for the other calls."""
    try:
        if name is not None:
            tensor_name = display = name if type(name) is str else str(name)
            call_site, cacheable = "", True
        else:
            call_site, display = naming.eager_unnamed("allreduce", 2)  # allreduce's caller
            tensor_name, cacheable = "", False
        if tensor._datatype_enum() not in _REDUCIBLE_ENUMS:
            _check_dtype(tensor, _REDUCIBLE, "allreduce", display)
        ranks = () if process_set is global_process_set else process_set._op_ranks(
            "tfring.allreduce")
        return _eager_call.allreduce(tensor, op, prescale_factor, postscale_factor,
                                     tensor_name, call_site, cacheable, ranks)
    except tf.errors.OpError as e:
        raise _cleaned(e) from None


def _allreduce_indexed_slices(slices, op, name, process_set, ignore_name_scope):
    # Horovod's rule and error type: only Sum and Average have a sparse form.
    if op == Adasum:
        _adasum.check_supported([slices], "allreduce", name)
    if op not in (Average, Sum):
        raise NotImplementedError("allreduce of tf.IndexedSlices supports op=Average and Sum "
                                  f"only, not op={_OP_NAMES[op]}.")
    values = allgather(slices.values, name=naming.sub_name(name, "values"),
                       ignore_name_scope=ignore_name_scope, process_set=process_set)
    indices = allgather(slices.indices, name=naming.sub_name(name, "indices"),
                        ignore_name_scope=ignore_name_scope, process_set=process_set)
    if op == Average:
        values = values / tf.cast(_set_size(process_set), values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


@_clean_eager_errors
def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set,
                      ignore_name_scope=False, name=None):
    """Allreduces a list of tensors submitted together, so they travel fused.

    Args and Returns: as `allreduce`, for each tensor of the list (dtypes may differ;
    tf.IndexedSlices are reduced as `allreduce` does, on their own).
    """
    op = _resolve_op(average, op)
    tensors = list(tensors)
    if not tensors:
        return []
    if op == Adasum:
        with _device(device_dense):
            tensors = [t if isinstance(t, tf.IndexedSlices) else _as_tensor(t)
                       for t in tensors]
            _adasum.check_supported(tensors, "grouped_allreduce", name or "unnamed group")
            compressed = [compression.compress(t) for t in tensors]
            reduced = _adasum.adasum([c[0] for c in compressed], name, ignore_name_scope,
                                     process_set, prescale_factor, postscale_factor)
            return [compression.decompress(r, c[1]) for r, c in zip(reduced, compressed)]
    if any(isinstance(t, tf.IndexedSlices) for t in tensors):
        return [allreduce(t, op=op, device_dense=device_dense, device_sparse=device_sparse,
                          compression=compression, prescale_factor=prescale_factor,
                          postscale_factor=postscale_factor,
                          name=naming.sub_name(name, i), process_set=process_set,
                          ignore_name_scope=ignore_name_scope)
                for i, t in enumerate(tensors)]
    with _device(device_dense):
        compressed = [compression.compress(_as_tensor(t)) for t in tensors]
        sent = [c[0] for c in compressed]
        naming_ = naming.op_naming("grouped_allreduce", name, sent, ignore_name_scope)
        for i, t in enumerate(sent):
            _check_dtype(t, _REDUCIBLE, "grouped_allreduce", f"{naming_.display}.{i}")
        reduced = _run_op("tfring_grouped_allreduce", naming_, sent, reduce_op=op,
                          prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                          cacheable=naming_.cacheable,
                          **process_set._op_kwargs("tfring.grouped_allreduce"))
        return [compression.decompress(r, c[1]) for r, c in zip(reduced, compressed)]


def _check_not_scalar(tensor, what, display):
    if tensor.shape.rank == 0:
        raise ValueError(f"{what} needs a tensor of rank >= 1; '{display}' is a scalar. "
                         "Reshape it to [1] first.")


@_clean_eager_errors
def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Concatenates every rank's tensor along the first dimension, in rank order.

    The first dimension may differ between ranks; the others must agree.

    Returns:
        A tensor whose first dimension is the sum of every rank's.
    """
    tensor = _as_tensor(tensor)
    naming_ = naming.op_naming("allgather", name, tensor, ignore_name_scope)
    _check_dtype(tensor, _GATHERABLE, "allgather", naming_.display)
    _check_not_scalar(tensor, "allgather", naming_.display)
    return _run_op("tfring_allgather", naming_, tensor,
                   **process_set._op_kwargs("tfring.allgather"))


@_clean_eager_errors
def grouped_allgather(tensors, name=None, ignore_name_scope=False,
                      process_set=global_process_set):
    """Allgathers a list of tensors submitted together, so they travel fused.

    Args and Returns: as `allgather`, for each tensor of the list (dtypes may differ).
    """
    tensors = [_as_tensor(t) for t in tensors]
    if not tensors:
        return []
    naming_ = naming.op_naming("grouped_allgather", name, tensors, ignore_name_scope)
    for i, t in enumerate(tensors):
        _check_dtype(t, _GATHERABLE, "grouped_allgather", f"{naming_.display}.{i}")
        _check_not_scalar(t, "grouped_allgather", f"{naming_.display}.{i}")
    return _run_op("tfring_grouped_allgather", naming_, tensors,
                   **process_set._op_kwargs("tfring.grouped_allgather"))


@_clean_eager_errors
def reducescatter(tensor, device_dense="", compression=Compression.none, op=Average,
                  name=None, process_set=global_process_set, ignore_name_scope=False,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces a tensor over all ranks; rank r gets its block of the first dimension.

    The first dimension (the same on every rank) is split as evenly as possible, the lower
    ranks taking one row more when it does not divide: 7 rows over 3 ranks give 3, 2, 2.

    Args: as `allreduce` (op: Average, Sum, Min, Max or Product).

    Returns:
        This rank's block of the reduced tensor.
    """
    op = _resolve_op(None, op)
    if op == Adasum:
        raise NotImplementedError("reducescatter does not support op=Adasum (Horovod neither); "
                                  "use Average, Sum, Min, Max or Product.")
    with _device(device_dense):
        tensor = _as_tensor(tensor)
        sent, ctx = compression.compress(tensor)
        naming_ = naming.op_naming("reducescatter", name, sent, ignore_name_scope)
        _check_dtype(sent, _REDUCIBLE, "reducescatter", naming_.display)
        _check_not_scalar(sent, "reducescatter", naming_.display)
        scattered = _run_op("tfring_reducescatter", naming_, sent, reduce_op=op,
                            prescale_factor=prescale_factor,
                            postscale_factor=postscale_factor, cacheable=naming_.cacheable,
                            **process_set._op_kwargs("tfring.reducescatter"))
        return compression.decompress(scattered, ctx)


def grouped_reducescatter(tensors, device_dense="", compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0, name=None):
    """`reducescatter` of each tensor of a list (dtypes may differ); returns their blocks.

    Submitted together; unlike grouped_allreduce they are not fused into one backend call
    (each block layout differs), but they share the runtime's cycles.
    """
    return [reducescatter(t, device_dense=device_dense, compression=compression, op=op,
                          prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                          name=naming.sub_name(name, i), process_set=process_set)
            for i, t in enumerate(tensors)]


@_clean_eager_errors
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
    tensor = _as_tensor(tensor)
    splits_given = splits is not None
    if splits is None:
        if tensor.shape.rank and tensor.shape[0] is not None and runtime.is_initialized() and \
                tensor.shape[0] % process_set.size() != 0:
            raise tf.errors.InvalidArgumentError(
                None, None, f"alltoall: {tensor.shape[0]} rows do not split evenly over "
                f"{process_set.size()} ranks; pass splits=")
        rows = tf.shape(tensor, out_type=tf.int64)[:1]
        size = tf.cast(_set_size(process_set), tf.int64)
        # Rows unknown until the graph runs that do not divide evenly give splits that do
        # not add up: the kernel then fails the call with InvalidArgumentError.
        splits = tf.fill(tf.reshape(size, [1]), rows[0] // size)
    naming_ = naming.op_naming("alltoall", name, tensor, ignore_name_scope)
    _check_dtype(tensor, _GATHERABLE, "alltoall", naming_.display)
    _check_not_scalar(tensor, "alltoall", naming_.display)
    received, received_splits = _run_op(
        "tfring_alltoall", naming_, tensor, tf.cast(tf.convert_to_tensor(splits), tf.int64),
        **process_set._op_kwargs("tfring.alltoall"))
    if not splits_given:
        return received
    return received, tf.cast(received_splits, tf.int32)


@_clean_eager_errors
def barrier(name=None, process_set=global_process_set):
    """Blocks until every rank (of the process set) has called `barrier` (with the same name).

    Returns None, except in a TF1 graph, where it returns the op to run (inside tf.function
    the op runs in program order by itself).
    """
    naming_ = naming.op_naming("barrier", name)
    op = _run_op("tfring_barrier", naming_, cacheable=naming_.cacheable,
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
        The last rank to join, as a scalar int32 tensor (as Horovod; `int()` of it in eager
        mode): the one that ran longest, to broadcast the final state from.
    """
    if not tf.executing_eagerly():
        _xla.check_op("tfring_join", "join")
    return _library.ops().tfring_join(eager=tf.executing_eagerly())


@_clean_eager_errors
def broadcast(tensor, root_rank, name=None, ignore_name_scope=False,
              process_set=global_process_set):
    """Returns root_rank's value of `tensor` on every rank (of the process set; root_rank is
    a global rank, a member of the set)."""
    tensor = _as_tensor(tensor)
    naming_ = naming.op_naming("broadcast", name, tensor, ignore_name_scope)
    _check_dtype(tensor, _GATHERABLE, "broadcast", naming_.display)
    _check_root(root_rank, process_set)
    return _run_op("tfring_broadcast", naming_, tensor, root_rank=root_rank,
                   cacheable=naming_.cacheable, **process_set._op_kwargs("tfring.broadcast"))
