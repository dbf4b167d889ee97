"""Collectives on plain values for Keras code (callbacks, metrics): numpy in, numpy out.

Horovod's `hvd.keras.allreduce(value)` takes a number or an array and gives back a value, so
a callback can average a Python float without touching TensorFlow. Tensors pass through as
tensors. Name these calls (`name=`) when they run in a loop: eager collectives are matched
across ranks by name.
"""

import numbers

import numpy as np
import tensorflow as tf

from tfring import collectives
from tfring.compression import Compression


def _to_tensor(value):
    """(tensor, whether to give numpy back): numbers, lists and numpy in give numpy out."""
    as_numpy = isinstance(value, (np.ndarray, np.generic, numbers.Number, list, tuple))
    return tf.convert_to_tensor(np.asarray(value) if as_numpy else value), as_numpy


def _result(tensor, as_numpy):
    return tensor.numpy() if as_numpy and hasattr(tensor, "numpy") else tensor


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0,
              op=None, compression=Compression.none):
    """Reduces `value` (a number, numpy array or tensor) over all ranks.

    Args: as `tfring.allreduce`; `op` defaults to Average.

    Returns:
        numpy for numpy/Python input, a tensor for tensor input. Example:
        `tfring.keras.allreduce(0.5, name="val_acc")` is the mean of every rank's 0.5.
    """
    tensor, as_numpy = _to_tensor(value)
    if as_numpy and tensor.dtype == tf.float64 and isinstance(value, float):
        tensor = tf.cast(tensor, tf.float32)  # a Python float: keep Keras's float32
    return _result(collectives.allreduce(tensor, average=average, op=op,
                                         compression=compression,
                                         prescale_factor=prescale_factor,
                                         postscale_factor=postscale_factor, name=name),
                   as_numpy)


def allgather(value, name=None):
    """Concatenates every rank's `value` along its first dimension (numpy in, numpy out)."""
    tensor, as_numpy = _to_tensor(value)
    return _result(collectives.allgather(tensor, name=name), as_numpy)


def broadcast(value, root_rank, name=None):
    """Returns root_rank's `value` on every rank (numpy in, numpy out)."""
    tensor, as_numpy = _to_tensor(value)
    return _result(collectives.broadcast(tensor, root_rank, name=name), as_numpy)


def reducescatter(value, name=None, op=collectives.Average):
    """This rank's block of `value` reduced over all ranks (numpy in, numpy out); blocks
    split the first dimension as `tfring.reducescatter` does."""
    tensor, as_numpy = _to_tensor(value)
    return _result(collectives.reducescatter(tensor, op=op, name=name), as_numpy)
