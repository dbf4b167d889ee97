"""Helpers shared by the parallel tests: inputs every rank can recompute, and run modes."""

import numpy as np
import tensorflow as tf

MODES = ["eager", "function", "graph"]
# And inside a function XLA compiles: for the collectives that have an XLA lowering.
XLA_MODES = MODES + ["xla"]

NP_DTYPES = {
    tf.uint8: np.uint8, tf.int8: np.int8, tf.uint16: np.uint16, tf.int16: np.int16,
    tf.int32: np.int32, tf.int64: np.int64,
    tf.float16: np.float16, tf.bfloat16: np.float32, tf.float32: np.float32,
    tf.float64: np.float64, tf.bool: np.bool_,
}


def rank_input(r, shape, dtype, low=-3, high=4):
    """Rank r's input: deterministic, so every rank can compute every rank's."""
    rng = np.random.default_rng(1000 + r)
    if dtype == tf.bool:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype in (tf.uint8, tf.uint16):
        low = max(low, 0)
    values = rng.integers(low, high, size=shape)
    if dtype.is_floating:
        values = values + rng.integers(0, 4, size=shape) * 0.25  # exact in 16-bit floats
    return values.astype(NP_DTYPES[dtype])


def run(mode, fn, *np_args):
    """Builds fn(*tensors) and runs it in `mode`: eager, tf.function, a tf.function that XLA
    compiles, or a TF1 graph+session."""
    if mode == "eager":
        out = fn(*[tf.constant(a) for a in np_args])
        return tf.nest.map_structure(lambda t: t.numpy(), out)
    if mode in ("function", "xla"):
        out = tf.function(fn, jit_compile=mode == "xla")(*[tf.constant(a) for a in np_args])
        return tf.nest.map_structure(lambda t: t.numpy(), out)
    with tf.Graph().as_default():
        out = fn(*[tf.constant(a) for a in np_args])
        with tf.compat.v1.Session() as session:
            return session.run(out)


def as_tf(values, dtype):
    return tf.cast(tf.constant(values), dtype)


def to_float(values):
    return np.asarray(tf.cast(values, tf.float64)) if not isinstance(values, np.ndarray) else \
        values.astype(np.float64)
