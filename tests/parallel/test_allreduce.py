"""allreduce and grouped_allreduce: every dtype x reduce op x mode against numpy."""

import math

import numpy as np
import pytest
import tensorflow as tf

import tfring
from _util import MODES, XLA_MODES, rank_input, run

DTYPES = [tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64, tf.float16, tf.bfloat16,
          tf.float32, tf.float64]
OPS = {"Sum": tfring.Sum, "Average": tfring.Average, "Min": tfring.Min, "Max": tfring.Max,
       "Product": tfring.Product}
SHAPE = (3, 5)


def expected(op_name, dtype, size):
    inputs = [rank_input(r, SHAPE, dtype, low=-2, high=3).astype(np.float64) for r in range(size)]
    stack = np.stack(inputs)
    if op_name == "Sum":
        return stack.sum(0)
    if op_name == "Average":
        total = stack.sum(0)
        return np.trunc(total / size) if dtype.is_integer else total / size
    if op_name == "Min":
        return stack.min(0)
    if op_name == "Max":
        return stack.max(0)
    return stack.prod(0)


@pytest.mark.parametrize("mode", XLA_MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_allreduce_every_op(dtype, mode, rank, size):
    mine = rank_input(rank, SHAPE, dtype, low=-2, high=3)

    def fn(x):
        x = tf.cast(x, dtype)
        return {name: tfring.allreduce(x, op=op) for name, op in OPS.items()}

    results = run(mode, fn, mine)
    for name in OPS:
        got = np.asarray(results[name]).astype(np.float64)
        want = expected(name, dtype, size)
        if dtype.is_floating and name == "Average":  # 1/size is inexact in binary
            tolerance = 1e-2 if dtype in (tf.float16, tf.bfloat16) else 1e-6
            np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance, err_msg=name)
        else:
            np.testing.assert_array_equal(got, want, err_msg=f"{name} {dtype.name}")


@pytest.mark.parametrize("mode", XLA_MODES)
def test_prescale_and_postscale(mode, rank, size):
    mine = rank_input(rank, SHAPE, tf.float32)
    got = run(mode, lambda x: tfring.allreduce(x, op=tfring.Sum, prescale_factor=0.5,
                                               postscale_factor=3.0), mine)
    total = sum(rank_input(r, SHAPE, tf.float32).astype(np.float64) for r in range(size))
    np.testing.assert_allclose(got, total * 0.5 * 3.0, rtol=1e-6)


@pytest.mark.parametrize("mode", XLA_MODES)
@pytest.mark.parametrize("dtype", [tf.uint8, tf.int8, tf.int16, tf.int32, tf.int64],
                         ids=lambda d: d.name)
def test_scale_factors_on_integers_truncate_as_horovod(dtype, mode, rank, size):
    # Horovod scales integers in float64 and truncates toward zero: the prescale on each
    # rank's input, the postscale (divided by the size for Average) on the sum.
    inputs = [rank_input(r, SHAPE, dtype, low=-5, high=6).astype(np.float64)
              for r in range(size)]

    def reduce(x):
        return [tfring.allreduce(x, op=tfring.Sum, prescale_factor=0.75),
                tfring.allreduce(x, op=tfring.Sum, postscale_factor=0.75),
                tfring.allreduce(x, op=tfring.Average, postscale_factor=3.0)]
    pre, post, average = run(mode, reduce, inputs[rank].astype(dtype.as_numpy_dtype))
    np.testing.assert_array_equal(pre, sum(np.trunc(x * 0.75) for x in inputs))
    np.testing.assert_array_equal(post, np.trunc(sum(inputs) * 0.75))
    np.testing.assert_array_equal(average, np.trunc(sum(inputs) * 3.0 / size))
    assert pre.dtype == dtype.as_numpy_dtype


# Per dtype: rank 0's input (values whose scaled result leaves the dtype's range, and some
# that land exactly on its bounds) and every other rank's (small, so that the sums stay in
# range and only the scaling can leave it).
CLAMP_INPUTS = {
    tf.int8: ([100, -100, 84, -85, 20, 127, -128], [-1, 1, 0, 0, 1, 0, 0]),
    tf.uint8: ([200, 100, 170, 5, 255, 0, 128], [0, 1, 0, 2, 0, 3, 0]),
    tf.int16: ([30000, -30000, 21845, -21846, 5000, 32767, -32768], [-1, 1, 0, 0, 1, 0, 0]),
    tf.int32: ([2**30 + 5, -(2**30 + 5), 2**30, -2**30, 7, 2**31 - 1, -2**31],
               [-1, 1, 0, 0, 1, 0, 0]),
    tf.int64: ([2**62 + 5, -(2**62 + 5), 2**62, -2**62, 7, 2**63 - 1, -2**63],
               [-1, 1, 0, 0, 1, 0, 0]),
}


def _wrapped(value, dtype):
    """A Python int as the dtype's arithmetic wraps it (modulo 2^bits)."""
    bits = dtype.size * 8
    value %= 1 << bits
    if not dtype.is_unsigned and value >= 1 << (bits - 1):
        return value - (1 << bits)
    return value


def _scaled(value, factor, dtype):
    """Horovod's integer scaling: in float64, truncated toward zero; and, as tfring's README
    says, clamped to the dtype's range where it leaves it."""
    scaled = math.trunc(float(value) * factor)  # float(): the double the C++ code rounds to
    return min(max(scaled, dtype.min), dtype.max)


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("dtype", list(CLAMP_INPUTS), ids=lambda d: d.name)
def test_scale_factors_on_integers_clamp_out_of_range_results(dtype, mode, rank, size):
    big, small = CLAMP_INPUTS[dtype]
    inputs = [big if r == 0 else small for r in range(size)]
    # Exact in float32 (scale factors are float32 attributes), and -1.5 * size / size is
    # -1.5 exactly in double, as the Average divides the postscale by the size.
    pre, pre_negative, post, average_post = 2.0, -1.5, 1.5, -1.5 * size

    def reduce(x):
        return [tfring.allreduce(x, op=tfring.Sum, prescale_factor=pre),
                tfring.allreduce(x, op=tfring.Sum, prescale_factor=pre_negative),
                tfring.allreduce(x, op=tfring.Sum, postscale_factor=post),
                tfring.allreduce(x, op=tfring.Average, postscale_factor=average_post)]
    got = run(mode, reduce, np.array(inputs[rank], dtype=dtype.as_numpy_dtype))

    def summed(arrays):  # elementwise, wrapping as the dtype's sum does
        return [_wrapped(sum(column), dtype) for column in zip(*arrays)]
    raw_sum = summed(inputs)
    want = [
        summed([[_scaled(v, pre, dtype) for v in x] for x in inputs]),
        summed([[_scaled(v, pre_negative, dtype) for v in x] for x in inputs]),
        [_scaled(v, post, dtype) for v in raw_sum],
        [_scaled(v, average_post / size, dtype) for v in raw_sum],
    ]
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == dtype.as_numpy_dtype, i
        assert g.tolist() == w, (i, g.tolist(), w)
    # The inputs really leave the range: without the clamp some results would differ.
    unclamped = [math.trunc(float(v) * post) for v in raw_sum]
    assert any(not dtype.min <= v <= dtype.max for v in unclamped)
    if dtype == tf.uint8:  # a negative scale of unsigned values gives 0, not a wrap
        assert want[1] == want[3] == [0] * len(big)


def test_average_argument_alias(rank, size):
    x = tf.constant([float(rank)])
    np.testing.assert_allclose(tfring.allreduce(x, average=False).numpy(),
                               [sum(range(size))])
    np.testing.assert_allclose(tfring.allreduce(x, average=True).numpy(),
                               [sum(range(size)) / size])


@pytest.mark.parametrize("mode", XLA_MODES)
def test_grouped_allreduce_mixed_dtypes(mode, rank, size):
    a = rank_input(rank, (4,), tf.float32)
    b = rank_input(rank, (2, 3), tf.int64)
    c = rank_input(rank, (7,), tf.float64)
    got = run(mode, lambda *xs: tfring.grouped_allreduce(list(xs), op=tfring.Sum), a, b, c)
    for i, (value, dtype, shape) in enumerate([(got[0], tf.float32, (4,)),
                                               (got[1], tf.int64, (2, 3)),
                                               (got[2], tf.float64, (7,))]):
        want = sum(rank_input(r, shape, dtype).astype(np.float64) for r in range(size))
        np.testing.assert_allclose(np.asarray(value, np.float64), want, err_msg=str(i))


@pytest.mark.parametrize("mode", MODES)
def test_grouped_allreduce_reduced_in_its_outputs(mode, rank, size):
    # A grouped op's outputs are slices of one buffer, laid out as the fusion buffer (each
    # at a multiple of 64 bytes). Every way its tensors can travel: fused in the buffer
    # (odd sizes, a scalar, an empty tensor), alone (2 MiB, above TFRING_FUSION_ALONE_BYTES),
    # split by dtype into groups whose tensors are not next to each other. The outputs then
    # feed other ops, which read them as ordinary (aligned) tensors.
    specs = [((17,), tf.float32), ((), tf.float32), ((0,), tf.float32), ((5, 3), tf.float16),
             ((1 << 19,), tf.float32), ((1000,), tf.int32), ((3, 7), tf.float32)]
    args = [rank_input(rank, shape, dtype) for shape, dtype in specs]

    def step(*xs):
        outs = tfring.grouped_allreduce(list(xs), op=tfring.Average)
        return [y * tf.ones_like(y) for y in outs]

    got = run(mode, step, *args)
    for i, (shape, dtype) in enumerate(specs):
        total = sum(rank_input(r, shape, dtype).astype(np.float64) for r in range(size))
        want = np.trunc(total / size) if dtype.is_integer else total / size
        rtol = 1e-3 if dtype == tf.float16 else 1e-6
        assert np.asarray(got[i]).shape == shape, i
        np.testing.assert_allclose(np.asarray(got[i], np.float64), want, rtol=rtol, err_msg=str(i))


def test_large_tensor_average(rank, size):
    # 4 MiB: above any plausible fusion group, travels alone straight into its output.
    # Every element differs, and every one is checked.
    x = tf.range(1 << 20, dtype=tf.float32) % 1000.0 + float(rank)
    got = tfring.allreduce(x, name="large").numpy()
    want = np.arange(1 << 20, dtype=np.float32) % 1000.0 + (size - 1) / 2.0
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_named_eager_loop_uses_cache(rank, size):
    # The same name every step: after the first, negotiation is a cache hit.
    for step in range(20):
        got = tfring.allreduce(tf.constant([float(step + rank)]), op=tfring.Sum, name="loop")
        assert got.numpy()[0] == step * size + sum(range(size))


def test_zero_element_tensor(rank, size):
    got = tfring.allreduce(tf.zeros([0, 3]), name="empty")
    assert got.shape == (0, 3)


def test_unnamed_allreduce_of_a_captured_eager_tensor_builds_a_graph_op(rank, size):
    # The function captures an eager tensor: its op is a graph op, named after the graph
    # (not numbered at run time as eager calls are).
    x = tf.constant([float(rank)])
    f = tf.function(lambda: tfring.allreduce(x, op=tfring.Sum))
    graph = f.get_concrete_function().graph
    names = [o.get_attr("tensor_name") for o in graph.get_operations()
             if o.type == "TfringAllreduce"]
    assert names and all(names), names
    for _ in range(3):
        np.testing.assert_array_equal(f(), [sum(range(size))])
