"""Collectives on plain values for Keras code (callbacks, metrics).

Horovod's `hvd.keras.allreduce(value)` takes a number, an array or a tensor and, in eager
mode, gives back a tensor (`.numpy()`, `float()` and numpy functions all work on it), so a
callback can average a Python float in one call. A Python float travels as float32, as
`tf.constant` makes it. Name these calls (`name=`) when they run in a loop: eager
collectives are matched across ranks by name.
"""

import tensorflow as tf

from tfring import collectives
from tfring.compression import Compression


def _to_tensor(value):
    # As Horovod's tf.constant(value): Python floats become float32, numpy keeps its dtype.
    return tf.convert_to_tensor(value)


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0,
              op=None, compression=Compression.none):
    """Reduces `value` (a number, numpy array or tensor) over all ranks.

    Args: as `tfring.allreduce`; `op` defaults to Average.

    Returns:
        A tensor, as Horovod's (in eager mode). Example:
        `tfring.keras.allreduce(0.5, name="val_acc")` is the mean of every rank's 0.5.
    """
    return collectives.allreduce(_to_tensor(value), average=average, op=op,
                                 compression=compression, prescale_factor=prescale_factor,
                                 postscale_factor=postscale_factor, name=name)


def allgather(value, name=None):
    """Concatenates every rank's `value` along its first dimension (a tensor back, as Horovod)."""
    return collectives.allgather(_to_tensor(value), name=name)


def broadcast(value, root_rank, name=None):
    """Returns root_rank's `value` on every rank (a tensor back, as Horovod)."""
    return collectives.broadcast(_to_tensor(value), root_rank, name=name)


def reducescatter(value, name=None, op=collectives.Average):
    """This rank's block of `value` reduced over all ranks (a tensor back, as Horovod); blocks
    split the first dimension as `tfring.reducescatter` does."""
    return collectives.reducescatter(_to_tensor(value), op=op, name=name)
