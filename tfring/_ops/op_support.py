"""What every collective's Python wrapper shares: the reduce ops by Horovod's names, the
dtype and argument checks, running the library's op, and the cleanup of eager errors.

It sits below tfring/collectives.py, tfring/_ops/data_movement.py and tfring/_ops/adasum.py, and
imports none of them.
"""

import contextlib
import functools
import re

import tensorflow as tf

from tfring._process import library as _library
from tfring._ops import xla
from tfring._ops import naming
from tfring._process import runtime
from tfring._adapters import tf_internals
from tfring._ops.process_sets import global_process_set

# Reduction ops, Horovod's names and values (kernels/common/types.h ReduceOp).
Average = 0
Sum = 1
Adasum = 2  # computed by tfring/_ops/adasum.py from alltoalls, not by the runtime's reduce ops
Min = 3
Max = 4
Product = 5
OP_NAMES = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max",
            Product: "Product"}

REDUCIBLE = (tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64, tf.float16,
             tf.bfloat16, tf.float32, tf.float64)
GATHERABLE = REDUCIBLE + (tf.bool,)
REDUCIBLE_ENUMS = frozenset(d.as_datatype_enum for d in REDUCIBLE)
_GATHERABLE_ENUMS = frozenset(d.as_datatype_enum for d in GATHERABLE)

EagerTensor = tf_internals.EagerTensor  # what eager ops return

_EAGER_NOISE = re.compile(r"^\{\{function_node [^}]*\}\}\s*|\s*\[Op:\w+\]( name: \S*)?\s*$")


def clean_eager_errors(fn):
    """Eager op errors carry TF's "{{function_node ...}} ... [Op:X]" wrapping; the runtime's
    message (tensor, problem, ranks) is what a user needs, so re-raise with that alone."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except tf.errors.OpError as e:
            raise cleaned(e) from None
    return wrapper


def cleaned(error):
    """`error` (a tf.errors.OpError) with TF's eager wrapping taken off its message: a new
    exception of its type, or `error` itself when there was none."""
    message = _EAGER_NOISE.sub("", error.message)
    return error if message == error.message else type(error)(error.node_def, error.op,
                                                                message)


def check_dtype(tensor, allowed, what, name):
    """Raises TypeError naming the tensor unless its dtype is in `allowed` (REDUCIBLE or
    GATHERABLE)."""
    enums = REDUCIBLE_ENUMS if allowed is REDUCIBLE else _GATHERABLE_ENUMS
    if tensor.dtype.as_datatype_enum not in enums:
        names = ", ".join(d.name for d in allowed)
        raise TypeError(f"tfring.{what} does not support dtype {tensor.dtype.name} (tensor "
                        f"'{name}'). Supported dtypes: {names}.")


def check_not_scalar(tensor, what, display):
    """Where the rank is known when the op is made; the kernels check the rest in the same
    words (common/status.h, ScalarInputMessage)."""
    if tensor.shape.rank == 0:
        raise ValueError(f"{what} needs a tensor of rank >= 1; '{display}' is a scalar. "
                         "Reshape it to [1] first.")


def run_op(op, naming_, *args, **attrs):
    """Creates (eagerly: runs) the library's op `op`, named as `naming_` (tfring._ops.naming)
    says, and records that it exists."""
    if not tf.executing_eagerly():
        xla.check_op(op, naming_.display)
    out = getattr(_library.ops(), op)(
        *args, tensor_name=naming_.tensor_name, call_site=naming_.call_site,
        eager=tf.executing_eagerly(), name=naming_.op_name, **attrs)
    naming.created(naming_)
    return out


def as_tensor(value):
    """`value` as a tensor. Eagerly, a tensor is returned as it is: tf.convert_to_tensor
    would do the same, at a cost that is a sizeable part of a small eager collective. In a
    graph it converts (an eager tensor used there becomes a captured input)."""
    if isinstance(value, tf.Tensor) and tf.executing_eagerly():
        return value
    return tf.convert_to_tensor(value)


def device(name):
    """Horovod's device_dense / device_sparse: where the op is placed ('' leaves it to TF)."""
    return tf.device(name) if name else contextlib.nullcontext()


def resolve_op(average, op):
    """The reduce op from Horovod's `op=` and its deprecated `average=`."""
    if average is not None:
        if op is not None:
            raise ValueError("Pass either `op` or the older `average`, not both.")
        return Average if average else Sum
    op = Average if op is None else op
    if op not in OP_NAMES:
        raise ValueError("`op` must be one of tfring.Average, Sum, Adasum, Min, Max, "
                         f"Product. Received: op={op!r}")
    return op


def check_root(root_rank, process_set=global_process_set):
    if not runtime.is_initialized():
        return
    if not 0 <= root_rank < runtime.size():
        raise ValueError(f"`root_rank` must be in [0, size) = [0, {runtime.size()}). "
                         f"Received: root_rank={root_rank}")
    if root_rank not in process_set.ranks:
        raise ValueError(f"`root_rank` {root_rank} is not in the process set "
                         f"{process_set.ranks}.")


def set_size(process_set):
    """The set's size as a tensor (works in graphs built before init for all ranks)."""
    if process_set is global_process_set:
        return runtime.job_size_op()
    return tf.constant(process_set.size(), tf.int32)
