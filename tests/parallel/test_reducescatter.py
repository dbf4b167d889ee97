"""reducescatter and grouped_reducescatter against numpy: uneven splits, every op, modes."""

import numpy as np
import pytest
import tensorflow as tf

import tfring
from _util import NP_DTYPES, XLA_MODES, rank_input, run

OPS = {"Sum": tfring.Sum, "Average": tfring.Average, "Min": tfring.Min, "Max": tfring.Max,
       "Product": tfring.Product}


def blocks(rows, size):
    """Horovod's split: as even as possible, lower ranks first."""
    counts = [rows // size + (1 if r < rows % size else 0) for r in range(size)]
    starts = np.cumsum([0] + counts)
    return [(starts[r], starts[r + 1]) for r in range(size)]


def reduced(op_name, dtype, shape, size):
    stack = np.stack([rank_input(r, shape, dtype, low=-2, high=3).astype(np.float64)
                      for r in range(size)])
    if op_name == "Average":
        total = stack.sum(0)
        return np.trunc(total / size) if dtype.is_integer else total / size
    return {"Sum": stack.sum, "Min": stack.min, "Max": stack.max, "Product": stack.prod}[op_name](0)


@pytest.mark.parametrize("mode", XLA_MODES)
@pytest.mark.parametrize("dtype", [tf.float32, tf.int32, tf.float16], ids=lambda d: d.name)
@pytest.mark.parametrize("op_name", list(OPS))
def test_reducescatter_uneven_rows(op_name, dtype, mode, rank, size):
    shape = (7, 3)  # 7 rows: uneven over 2 and 3 ranks
    x = rank_input(rank, shape, dtype, low=-2, high=3)
    got = run(mode, lambda t: tfring.reducescatter(t, op=OPS[op_name],
                                                   name=f"rs.{op_name}.{dtype.name}.{mode}"), x)
    start, end = blocks(7, size)[rank]
    want = reduced(op_name, dtype, shape, size)[start:end]
    assert got.shape == (end - start, 3)
    if op_name == "Average" and dtype.is_floating:
        # 1/size is inexact: the result is the exact mean rounded to the dtype (one ulp).
        eps = float(np.finfo(dtype.as_numpy_dtype).eps)
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=eps, atol=0)
    else:  # small values: sums, products, minima and integer means are exact in the dtype
        np.testing.assert_array_equal(got.astype(np.float64), want)


def test_reducescatter_scale_factors_and_fewer_rows_than_ranks(rank, size):
    x = tf.constant(rank_input(rank, (4, 2), tf.float64, low=-2, high=3))
    # Factors whose product is not 1: a kernel that ignored either would be off.
    got = tfring.reducescatter(x, op=tfring.Sum, prescale_factor=2.0, postscale_factor=0.75,
                               name="rs.scaled").numpy()
    start, end = blocks(4, size)[rank]
    np.testing.assert_allclose(got, 1.5 * reduced("Sum", tf.float64, (4, 2), size)[start:end])
    one = tfring.reducescatter(tf.ones([1, 2]), op=tfring.Sum, name="rs.one").numpy()
    assert one.shape == ((1, 2) if rank == 0 else (0, 2))  # rank 0 alone gets the row


def test_grouped_reducescatter(rank, size):
    a = rank_input(rank, (5,), tf.float32)
    b = rank_input(rank, (3, 2), tf.int64)
    got = tfring.grouped_reducescatter([a, b], op=tfring.Sum, name="grs")
    for g, x, rows in zip(got, (a, b), (5, 3)):
        start, end = blocks(rows, size)[rank]
        total = np.sum([rank_input(r, x.shape, tf.as_dtype(x.dtype)) for r in range(size)], 0)
        np.testing.assert_array_equal(g.numpy(), total[start:end])


@pytest.mark.parametrize("op_name", ["Sum", "Average"])
def test_reducescatter_gradient(op_name, rank, size):
    x = tf.constant(rank_input(rank, (5, 2), tf.float32))  # blocks of unequal rows
    # Each rank's upstream gradient differs, so the gradient must gather every rank's.
    upstream = [rank_input(r + 50, (end - start, 2), tf.float32)
                for r, (start, end) in enumerate(blocks(5, size))]
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = tfring.reducescatter(x, op=OPS[op_name], prescale_factor=3.0,
                                   name=f"rs.grad.{op_name}")
    grad = tape.gradient(out, x, output_gradients=tf.constant(upstream[rank])).numpy()
    # Horovod's definition: every rank's upstream block gathered, times the scale factor,
    # and times size for Sum.
    want = np.concatenate(upstream) * 3.0 * (size if op_name == "Sum" else 1)
    np.testing.assert_array_equal(grad, want)


def test_reducescatter_errors(rank, size):
    with pytest.raises(ValueError, match="'rs.scalar' is a scalar"):
        tfring.reducescatter(tf.constant(1.0), name="rs.scalar")
    # A rank unknown until the op runs: the kernel says it, in the same words.
    unknown_rank = tf.function(lambda x: tfring.reducescatter(x, name="rs.scalar.late"),
                               input_signature=[tf.TensorSpec(None, tf.float32)])
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"'rs.scalar.late' is a scalar. Reshape it to \[1\] first"):
        unknown_rank(tf.constant(1.0))
    rows = 4 if rank == 0 else 5
    with pytest.raises(tf.errors.FailedPreconditionError,
                       match=r"Mismatched shapes for tensor 'rs.mismatch': rank 0 sent \[4\]"):
        tfring.reducescatter(tf.ones([rows]), name="rs.mismatch")


def test_reducescatter_under_xla_with_scale_factors_and_a_process_set(rank, size):
    # A block of rows per member, known when XLA compiles; a non-member builds nothing.
    members = tfring.ProcessSet([0, 1])
    x = tf.constant(rank_input(rank, (5, 2), tf.float64, low=-2, high=3))
    step = tf.function(lambda t: tfring.reducescatter(
        t, op=tfring.Sum, prescale_factor=2.0, postscale_factor=0.75, name="rs.xla.set",
        process_set=members), jit_compile=True)
    if rank > 1:
        return
    got = step(x).numpy()
    start, end = blocks(5, 2)[rank]
    total = sum(rank_input(r, (5, 2), tf.float64, low=-2, high=3) for r in (0, 1))
    np.testing.assert_allclose(got, 1.5 * total[start:end])


LARGE_ROWS = 100_003  # x 3 columns: at least 256 KiB in every dtype below, rows uneven


def wide_input(r, dtype, shape):
    """Rank r's integers over the dtype's whole range: their sums and products wrap."""
    info = np.iinfo(NP_DTYPES[dtype])
    rng = np.random.default_rng(2000 + r)
    return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(NP_DTYPES[dtype])


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64, tf.float16, tf.bfloat16, tf.int8,
                                   tf.uint8, tf.int16, tf.int32, tf.int64], ids=lambda d: d.name)
@pytest.mark.parametrize("op_name", list(OPS))
def test_large_reducescatter_is_exact_and_wraps(op_name, dtype, rank, size):
    # From 256 KiB the MPI backend reduces over its own ring (mpi_backend.cc): each block's
    # sum is built in another order on another rank, and must still be the exact result,
    # wrapping as numpy's integer arithmetic does.
    shape = (LARGE_ROWS, 3)
    wraps = dtype.is_integer and op_name != "Average"
    inputs = [wide_input(r, dtype, shape) if wraps else rank_input(r, shape, dtype, -2, 3)
              for r in range(size)]
    got = tfring.reducescatter(tf.constant(inputs[rank], dtype=dtype), op=OPS[op_name],
                               name=f"rs.large.{op_name}.{dtype.name}").numpy()
    start, end = blocks(LARGE_ROWS, size)[rank]
    if wraps:
        combine = {"Sum": np.add, "Product": np.multiply, "Min": np.minimum,
                   "Max": np.maximum}[op_name]
        want = inputs[0]
        for x in inputs[1:]:
            want = combine(want, x)  # in the dtype: wraps modulo 2^bits
        np.testing.assert_array_equal(got, want[start:end])
        return
    want = reduced(op_name, dtype, shape, size)[start:end]
    if dtype == tf.bfloat16 and op_name in ("Average", "Product"):
        # 8 bits of mantissa: a product of three is rounded twice, in the order of the ring.
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=2 ** -7, atol=0)
    elif op_name == "Average" and dtype.is_floating:
        eps = float(np.finfo(NP_DTYPES[dtype]).eps)
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=eps, atol=0)
    else:
        np.testing.assert_array_equal(got.astype(np.float64), want)


def test_large_reducescatter_in_a_process_set(rank, size):
    members = tfring.ProcessSet([0, size - 1])  # ranks 0 and 1 at 2 ranks, 0 and 2 at 3
    x = tf.constant(rank_input(rank, (LARGE_ROWS, 3), tf.float32))
    if rank not in members.ranks:
        return
    got = tfring.reducescatter(x, op=tfring.Sum, process_set=members, name="rs.large.set")
    start, end = blocks(LARGE_ROWS, 2)[members.ranks.index(rank)]
    total = sum(rank_input(r, (LARGE_ROWS, 3), tf.float32) for r in members.ranks)
    np.testing.assert_array_equal(got.numpy(), total[start:end])
