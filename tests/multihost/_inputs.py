"""The allreduces of the multi-host job and their inputs: each rank's input is a function of
its rank alone, so the test recomputes every result with numpy (no TensorFlow here)."""

import zlib

import numpy as np

# (name, dtype, shape, op). 1001 elements: not a multiple of the ranks per host, so a
# hierarchical allreduce that splits tensors between a host's ranks meets a remainder.
SINGLE = [
    ("int32.sum", "int32", (1001,), "sum"),
    ("int32.average", "int32", (7,), "average"),  # the mean rounded toward zero
    ("int64.sum", "int64", (3, 5), "sum"),
    ("float16.sum", "float16", (33,), "sum"),
    ("float32.sum", "float32", (1001,), "sum"),
    ("float32.average", "float32", (2, 3), "average"),
    ("float64.sum", "float64", (257,), "sum"),
]
# One grouped_allreduce (Sum), fused into one buffer.
GROUP = [("group.0", "float32", (5,)), ("group.1", "float32", (1,)),
         ("group.2", "float32", (300,))]
# Values not exact in float32: the sum depends on the order of additions, so the
# hierarchical and flat results may differ in the last bits (compared with a tolerance).
INEXACT = ("float32.normal.sum", "float32", (1001,), "sum")


def rank_input(name, rank, dtype, shape):
    """Small integers, plus quarters for floats: exact in every dtype, and so is every
    partial sum of 4 ranks, whatever the order of additions."""
    rng = np.random.default_rng([rank, zlib.crc32(name.encode())])
    if name == INEXACT[0]:
        return rng.standard_normal(shape).astype(dtype)
    values = rng.integers(-3, 4, size=shape).astype(np.float64)
    if np.dtype(dtype).kind == "f":
        values += rng.integers(0, 4, size=shape) * 0.25
    return values.astype(dtype)


def expected(name, dtype, shape, op, size):
    """The allreduce of every rank's input, in float64 then cast back."""
    total = sum(rank_input(name, r, dtype, shape).astype(np.float64) for r in range(size))
    if op == "average":
        total = np.trunc(total / size) if np.dtype(dtype).kind == "i" else total / size
    return total.astype(dtype)
