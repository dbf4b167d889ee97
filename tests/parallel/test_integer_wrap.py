"""Integer reductions that overflow wrap modulo 2^bits, as TensorFlow's and numpy's integer
arithmetic do, on every host path: eager, tf.function, TF1 graphs, XLA, fused (several
tensors of one dtype and op in one fusion buffer, which the timeline shows), grouped,
process sets, hierarchical (one level and across "hosts"), join (eager and in a function),
reducescatter.

MPI's own ops need not wrap: Open MPI 5's AVX component saturates 8- and 16-bit sums
(int8 100 + 100 gives 127, not -56), which is why tfring reduces integer sums and products
with its own MPI ops. Inputs here span each dtype's whole range, 1,000 elements (long enough
for MPI's vectorized paths), and every expected value is numpy's own wrapping arithmetic.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import tfring
from _util import XLA_MODES, run

INT_DTYPES = [tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64]
OPS = {"Sum": tfring.Sum, "Average": tfring.Average, "Min": tfring.Min, "Max": tfring.Max,
       "Product": tfring.Product}
N = 1000


def wide_input(r, dtype, salt=0, n=N):
    """Rank r's input: uniform over the dtype's whole range (sums of two overflow about half
    the time, products nearly always)."""
    info = np.iinfo(dtype.as_numpy_dtype)
    rng = np.random.default_rng(7000 + 31 * r + salt)
    return rng.integers(info.min, info.max, size=n, dtype=dtype.as_numpy_dtype, endpoint=True)


def numpy_reduce(op_name, inputs):
    """The reduction in numpy's wrapping arithmetic; Average is the wrapped sum divided
    toward zero by the number of inputs (tfring's and Horovod's integer Average)."""
    stack = np.stack(inputs)
    dtype = stack.dtype
    with np.errstate(over="ignore"):
        if op_name == "Min":
            return stack.min(0)
        if op_name == "Max":
            return stack.max(0)
        if op_name == "Product":
            return np.prod(stack, axis=0, dtype=dtype)
        total = np.sum(stack, axis=0, dtype=dtype)
    if op_name == "Sum":
        return total
    wide = total.astype(np.int64)  # exact: every dtype here fits, int64 itself included
    quotient = wide // len(inputs)
    quotient[(wide % len(inputs) != 0) & (wide < 0)] += 1  # floor to toward-zero
    return quotient.astype(dtype)


def assert_wrapped(got, op_name, dtype, ranks, salt=0):
    want = numpy_reduce(op_name, [wide_input(r, dtype, salt) for r in ranks])
    got = np.asarray(got)
    assert got.dtype == want.dtype
    wrong = np.flatnonzero(got != want)
    assert wrong.size == 0, (f"{op_name} {dtype.name} over ranks {ranks}: {wrong.size} of "
                             f"{want.size} wrong, first at {wrong[0]}: got {got[wrong[0]]}, "
                             f"want {want[wrong[0]]}")


def test_numpy_reference_wraps():
    # The reference itself: 100 + 100 in int8 is -56, and Average divides toward zero.
    a, b = np.array([100, -100, -3], np.int8), np.array([100, -100, 0], np.int8)
    np.testing.assert_array_equal(numpy_reduce("Sum", [a, b]), [-56, 56, -3])
    np.testing.assert_array_equal(numpy_reduce("Average", [a, b]), [-28, 28, -1])


@pytest.mark.parametrize("mode", XLA_MODES)
def test_every_integer_dtype_and_op(mode, rank, size):
    # One tensor per dtype and op: each travels alone (test_fused packs several together).
    inputs = [wide_input(rank, d) for d in INT_DTYPES]

    def fn(*xs):
        return [[tfring.allreduce(x, op=op) for op in OPS.values()] for x in xs]

    results = run(mode, fn, *inputs)
    for dtype, per_op in zip(INT_DTYPES, results):
        for op_name, got in zip(OPS, per_op):
            assert_wrapped(got, op_name, dtype, range(size))


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_grouped(mode, rank, size):
    def fn(*xs):
        return [tfring.grouped_allreduce(list(xs), op=op) for op in OPS.values()]

    for dtype in INT_DTYPES:
        results = run(mode, fn, wide_input(rank, dtype, 1), wide_input(rank, dtype, 2))
        for op_name, (first, second) in zip(OPS, results):
            assert_wrapped(first, op_name, dtype, range(size), salt=1)
            assert_wrapped(second, op_name, dtype, range(size), salt=2)


def test_process_set(rank, size):
    # The first and the last rank: at 3 ranks a set that leaves rank 1 out.
    members = [0, size - 1]
    subset = tfring.ProcessSet(members)
    if rank not in members:
        return
    for dtype in INT_DTYPES:
        for op_name, op in OPS.items():
            got = tfring.allreduce(tf.constant(wide_input(rank, dtype)), op=op,
                                   process_set=subset)
            assert_wrapped(got.numpy(), op_name, dtype, members)


def test_reducescatter(rank, size):
    rows = N - N % size  # even blocks, so the expected block is a plain slice
    for dtype in INT_DTYPES:
        for op_name, op in OPS.items():
            got = tfring.reducescatter(tf.constant(wide_input(rank, dtype)[:rows]), op=op)
            want = numpy_reduce(op_name, [wide_input(r, dtype)[:rows] for r in range(size)])
            block = rows // size
            np.testing.assert_array_equal(got.numpy(), want[rank * block:(rank + 1) * block],
                                          err_msg=f"{op_name} {dtype.name}")


def _restart(env):
    """Restarts tfring with `env` (every rank alike), or with none of it when env is empty."""
    tfring.shutdown()
    for k in ("TFRING_HIERARCHICAL_ALLREDUCE", "TFRING_HOSTID", "TFRING_TIMELINE",
              "TFRING_CYCLE_TIME", "TFRING_BATCH_GAP_US"):
        os.environ.pop(k, None)
    os.environ.update(env)
    tfring.init()


@pytest.fixture
def timeline_path(shared_tmp_path):
    yield os.path.join(shared_tmp_path, "wrap_timeline.json")
    _restart({})


def _phases(path):
    """The phases rank 0's timeline recorded (each a Chrome-trace begin event)."""
    with open(path) as f:
        return [e for e in json.load(f) if e.get("ph") == "B"]


def test_fused(timeline_path, rank, size):
    # Three tensors per dtype and op in one function; a long batch gap makes the runtime wait
    # for all of a step's ops, so those of one dtype and op share a fusion buffer (its
    # integer Average divides each tensor's span of the buffer).
    copies = 3
    _restart({"TFRING_TIMELINE": timeline_path, "TFRING_CYCLE_TIME": "200",
              "TFRING_BATCH_GAP_US": "100000"})
    inputs = [wide_input(rank, d, salt=k) for d in INT_DTYPES for k in range(copies)]

    def fn(*xs):
        # Named "wrap.<dtype>.<op>.<copy>", so the timeline's groups say what they held.
        return [[tfring.allreduce(x, op=op, name=f"wrap.{INT_DTYPES[i // copies].name}."
                                                 f"{op_name}.{i % copies}")
                 for op_name, op in OPS.items()] for i, x in enumerate(xs)]

    results = run("function", fn, *inputs)
    tfring.stop_timeline()
    for i, per_op in enumerate(results):
        for op_name, got in zip(OPS, per_op):
            assert_wrapped(got, op_name, INT_DTYPES[i // copies], range(size), salt=i % copies)
    if rank == 0:
        fused = {".".join(e["args"]["group"].split(".")[1:3]) for e in _phases(timeline_path)
                 if e["name"] == "MPI_ALLREDUCE" and e.get("args", {}).get("tensors", 1) > 1}
        want = {f"{d.name}.{op_name}" for d in INT_DTYPES for op_name in OPS}
        assert want <= fused, f"never in a fusion buffer: {sorted(want - fused)}"


@pytest.mark.parametrize("per_host", [None, 1, 2])
def test_hierarchical(per_host, timeline_path, rank, size):
    # per_host None: MPI's own layout (one host here); 1: every rank a host of its own, so
    # the step across hosts does all the reducing; 2: at 3 ranks, hosts {0, 1} and {2}.
    env = {"TFRING_HIERARCHICAL_ALLREDUCE": "1", "TFRING_TIMELINE": timeline_path}
    if per_host:
        env["TFRING_HOSTID"] = f"block-{rank // per_host}"
    _restart(env)
    for mode in ("eager", "function"):
        results = run(mode, lambda *xs: [[tfring.allreduce(x, op=op) for op in OPS.values()]
                                          for x in xs],
                      *[wide_input(rank, d) for d in INT_DTYPES])
        for dtype, per_op in zip(INT_DTYPES, results):
            for op_name, got in zip(OPS, per_op):
                assert_wrapped(got, op_name, dtype, range(size))
    tfring.stop_timeline()
    if rank == 0:
        phases = {e["name"] for e in _phases(timeline_path)}
        assert "MPI_HIERARCHICAL_ALLREDUCE" in phases, phases


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_join(mode, rank, size):
    # Rank r has r + 1 steps of data; at step s only ranks r >= s reduce, the joined ones
    # contribute each op's identity (and Average divides by the ranks that had data).
    def step_fn(*xs):
        return [[tfring.allreduce(x, op=op) for op in OPS.values()] for x in xs]

    for step in range(rank + 1):
        results = run(mode, step_fn, *[wide_input(rank, d, salt=step) for d in INT_DTYPES])
        present = [r for r in range(size) if r >= step]
        for dtype, per_op in zip(INT_DTYPES, results):
            for op_name, got in zip(OPS, per_op):
                assert_wrapped(got, op_name, dtype, present, salt=step)
    assert tfring.join() == size - 1
