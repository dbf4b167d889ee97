"""The benchmarks' own TensorFlow ops (bench/ops/async_floor.cc): a library of their own that
`python -m tfring.build --tests` (make build) builds beside the native benchmarks, so that
the shipped library carries no benchmark code."""

import functools
import os

import tensorflow as tf

from tfring._process import autodeps as _autodeps

LIBRARY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build",
                       "bench", "libtfring_bench_ops.so")
# They stand in for a step's allreduces, so tf.function must schedule them as it does
# tfring's collectives: in any order, never chained (tfring/_process/autodeps.py).
FLOOR_OP_TYPES = ("TfringAsyncFloor", "TfringAsyncBurstFloor")


@functools.lru_cache(maxsize=None)
def ops():
    """The loaded library's op wrappers (tfring_async_floor, tfring_async_burst_floor)."""
    if not os.path.exists(LIBRARY):
        raise RuntimeError(f"{LIBRARY} is missing: build it with `python -m tfring.build "
                           "--tests` (make build does)")
    library = tf.load_op_library(LIBRARY)
    _autodeps.allow_unordered_collectives(FLOOR_OP_TYPES)
    return library
