"""What tfring's Keras callbacks share: the base classes of the Keras in use, XLA off for
their model, and checks and conversions of optimizers and numbers."""

import math
import numbers

import numpy as np
import tensorflow as tf

from tfring.keras import _xla

# Resolved now: Keras 3 normally, tf_keras when TF_USE_LEGACY_KERAS=1 was set before import.
Callback = tf.keras.callbacks.Callback
ModelCheckpoint = tf.keras.callbacks.ModelCheckpoint


class NoXlaMixin:
    """Turns XLA off for the model a callback is attached to (before Keras traces the step)."""

    def set_model(self, model):
        _xla.disable_jit_compile(model, type(self).__name__)
        super().set_model(model)


def innermost(optimizer):
    """Follows `inner_optimizer` (DistributedOptimizer, LossScaleOptimizer) to the real one."""
    seen = set()
    while getattr(optimizer, "inner_optimizer", None) is not None and id(optimizer) not in seen:
        seen.add(id(optimizer))
        optimizer = optimizer.inner_optimizer
    return optimizer


def as_float(value):
    """A Python float from a float, numpy value, tensor or (Keras) variable."""
    if hasattr(value, "numpy"):
        value = value.numpy()
    return float(np.asarray(value))


def check_positive_number(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or \
            not math.isfinite(value) or value <= 0:
        raise ValueError(f"`{name}` must be a number > 0. Received: {name}={value!r}")
    return value


def check_optional_positive_int(name, value):
    if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral)
                              or value <= 0):
        raise ValueError(f"`{name}` must be an integer > 0 or None. Received: {name}={value!r}")
    return value


def optimizer_of(model, who):
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None:
        raise ValueError(f"{who} needs a compiled model: call model.compile(optimizer=...) "
                         "before fit().")
    return optimizer
