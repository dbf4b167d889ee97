"""The reductions: allreduce, grouped_allreduce, reducescatter, grouped_reducescatter
(tfring.collectives offers them, with the ops that move data, as Horovod's module of all the
collectives).

Each works in eager mode, inside tf.function and in TF1 graphs, and has a gradient
(gradients.py). The data goes from the op's C++ kernel to the runtime and MPI without
passing through Python. Each takes `process_set=` (tfring.ProcessSet) to run among a subset
of the ranks, and is named as naming.py says. Signatures are Horovod's, in Horovod's order.
Adasum's reduction is adasum.py's.
"""

import tensorflow as tf

from tfring._ops import eager_call as _eager_call
from tfring._ops import adasum as _adasum
from tfring._ops import naming
from tfring._adapters import tf_internals
from tfring._ops.data_movement import allgather
from tfring._ops.op_support import (
    Adasum, Average, EagerTensor, Max, Min, OP_NAMES, Product, REDUCIBLE, REDUCIBLE_ENUMS,
    Sum, as_tensor, check_dtype, check_not_scalar, clean_eager_errors, cleaned, device,
    resolve_op, run_op, set_size)
from tfring.compression import Compression
from tfring._ops.process_sets import global_process_set

_dtype_enum = tf_internals.eager_dtype_enum


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
            a power-of-two number of ranks; tfring/_ops/adasum.py). Average of an integer
            tensor is the mean rounded toward zero, as Horovod.
        prescale_factor: multiplies the input before the reduction (integers: in float64,
            truncated toward zero, as Horovod).
        postscale_factor: multiplies the result (the same way).
        name: the name that pairs this tensor across ranks (see tfring._ops.naming).
        process_set: the ranks that take part (tfring.ProcessSet); default all.
        ignore_name_scope: in a graph, leave the name scope out of the derived name.

    Returns:
        A tensor of the same shape and dtype (a tf.IndexedSlices for one).

    Example:
        >>> total = tfring.allreduce(tf.constant([1.0, 2.0]), op=tfring.Sum, name="x")
    """
    # The common eager call first, with no layer around it (_eager_allreduce says why). A
    # function being traced may capture an eager tensor: it builds a graph op instead.
    if (type(tensor) is EagerTensor and op in _EAGER_PATH_OPS and average is None and
            not device_dense and compression is Compression.none and tf.executing_eagerly()):
        return _eager_allreduce(tensor, Average if op is None else op, prescale_factor,
                                postscale_factor, name, process_set)
    return _allreduce(tensor, average, device_dense, device_sparse, compression, op,
                      prescale_factor, postscale_factor, name, process_set, ignore_name_scope)


# The ops the eager path takes (None: Average); Adasum is computed in Python (adasum.py).
_EAGER_PATH_OPS = frozenset((None, Average, Sum, Min, Max, Product))


@clean_eager_errors
def _allreduce(tensor, average, device_dense, device_sparse, compression, op,
               prescale_factor, postscale_factor, name, process_set, ignore_name_scope):
    """allreduce's general path: graphs, tf.IndexedSlices, compression, Adasum, devices."""
    op = resolve_op(average, op)
    if isinstance(tensor, tf.IndexedSlices):
        if prescale_factor != 1.0 or postscale_factor != 1.0:  # Horovod's rule and error type
            raise NotImplementedError("prescale_factor and postscale_factor are not supported "
                                      "with tf.IndexedSlices (scale the values yourself, or "
                                      "pass a dense tensor).")
        with device(device_sparse):
            return _allreduce_indexed_slices(tensor, op, name, process_set, ignore_name_scope)
    with device(device_dense):
        tensor = as_tensor(tensor)
        sent, ctx = compression.compress(tensor)
        if op == Adasum:
            _adasum.check_supported([sent], "allreduce", name or "unnamed allreduce")
            reduced, = _adasum.adasum([sent], name, ignore_name_scope, process_set,
                                      prescale_factor, postscale_factor)
            return compression.decompress(reduced, ctx)
        naming_ = naming.op_naming("allreduce", name, sent, ignore_name_scope)
        check_dtype(sent, REDUCIBLE, "allreduce", naming_.display)
        reduced = run_op("tfring_allreduce", naming_, sent, reduce_op=op,
                          prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                          cacheable=naming_.cacheable,
                          **process_set._op_kwargs("tfring.allreduce"))
        return compression.decompress(reduced, ctx)


def _eager_allreduce(tensor, op, prescale_factor, postscale_factor, name, process_set):
    """allreduce's most common call, kept short: an eager tensor, no device, compression
    or Adasum. For a small tensor the Python layer is a sizeable part of the call (its lines
    run with the CPU's caches cold after TensorFlow's op), so this path does only what the
    general one would do for it, and runs the op through
    TensorFlow's fast path directly (tfring/_ops/eager_call.py). Its errors are cleaned here, as
    clean_eager_errors does for the other calls."""
    try:
        if name is not None:
            tensor_name = display = name if type(name) is str else str(name)
            call_site, cacheable = "", True
        else:
            call_site, display = naming.eager_unnamed("allreduce", 2)  # allreduce's caller
            tensor_name, cacheable = "", False
        if _dtype_enum(tensor) not in REDUCIBLE_ENUMS:
            check_dtype(tensor, REDUCIBLE, "allreduce", display)
        ranks = () if process_set is global_process_set else process_set._op_ranks(
            "tfring.allreduce")
        return _eager_call.allreduce(tensor, op, prescale_factor, postscale_factor,
                                     tensor_name, call_site, cacheable, ranks,
                                     process_set._world if ranks else 0)
    except tf.errors.OpError as e:
        raise cleaned(e) from None


def _allreduce_indexed_slices(slices, op, name, process_set, ignore_name_scope):
    # Horovod's rule and error type: only Sum and Average have a sparse form.
    if op == Adasum:
        _adasum.check_supported([slices], "allreduce", name)
    if op not in (Average, Sum):
        raise NotImplementedError("allreduce of tf.IndexedSlices supports op=Average and Sum "
                                  f"only, not op={OP_NAMES[op]}.")
    values = allgather(slices.values, name=naming.sub_name(name, "values"),
                       ignore_name_scope=ignore_name_scope, process_set=process_set)
    indices = allgather(slices.indices, name=naming.sub_name(name, "indices"),
                        ignore_name_scope=ignore_name_scope, process_set=process_set)
    if op == Average:
        values = values / tf.cast(set_size(process_set), values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


@clean_eager_errors
def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set,
                      ignore_name_scope=False, name=None):
    """Allreduces a list of tensors submitted together, so they travel fused.

    Args and Returns: as `allreduce`, for each tensor of the list (dtypes may differ;
    tf.IndexedSlices are reduced as `allreduce` does, on their own).
    """
    op = resolve_op(average, op)
    tensors = list(tensors)
    if not tensors:
        return []
    if op == Adasum:
        with device(device_dense):
            tensors = [t if isinstance(t, tf.IndexedSlices) else as_tensor(t)
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
    with device(device_dense):
        compressed = [compression.compress(as_tensor(t)) for t in tensors]
        sent = [c[0] for c in compressed]
        naming_ = naming.op_naming("grouped_allreduce", name, sent, ignore_name_scope)
        for i, t in enumerate(sent):
            check_dtype(t, REDUCIBLE, "grouped_allreduce",
                        naming.part_display(naming_.display, i, len(sent)))
        reduced = run_op("tfring_grouped_allreduce", naming_, sent, reduce_op=op,
                          prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                          cacheable=naming_.cacheable,
                          **process_set._op_kwargs("tfring.grouped_allreduce"))
        return [compression.decompress(r, c[1]) for r, c in zip(reduced, compressed)]


@clean_eager_errors
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
    op = resolve_op(None, op)
    if op == Adasum:
        raise NotImplementedError("reducescatter does not support op=Adasum (Horovod neither); "
                                  "use Average, Sum, Min, Max or Product.")
    with device(device_dense):
        tensor = as_tensor(tensor)
        sent, ctx = compression.compress(tensor)
        naming_ = naming.op_naming("reducescatter", name, sent, ignore_name_scope)
        check_dtype(sent, REDUCIBLE, "reducescatter", naming_.display)
        check_not_scalar(sent, "reducescatter", naming_.display)
        scattered = run_op("tfring_reducescatter", naming_, sent, reduce_op=op,
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
