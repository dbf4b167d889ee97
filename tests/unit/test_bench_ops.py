"""The benchmarks' own ops (bench/ops/async_floor.cc, bench/_bench_ops.py): the Keras
benchmark's floor measurements are only as good as these stand-ins for allreduce."""

import os
import sys

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import _bench_ops  # noqa: E402


def test_the_benchmarks_async_floor_op_passes_its_input_through():
    # bench/keras_fit.py puts it where a step's allreduces would be: it must give back the
    # tensor itself, eagerly and in a graph, whatever its dtype and shape.
    floor = _bench_ops.ops().tfring_async_floor
    for value in (np.arange(6, dtype=np.float32).reshape(2, 3), np.array([7, -1], np.int64)):
        np.testing.assert_array_equal(floor(tf.constant(value)).numpy(), value)

    @tf.function
    def step(x):
        return floor(x) * 2

    x = tf.constant([1.5, -2.0])
    np.testing.assert_array_equal(step(x).numpy(), [3.0, -4.0])
    assert step.get_concrete_function(x).output_shapes == tf.TensorShape([2])


def test_the_benchmarks_burst_floor_op_completes_a_whole_burst():
    # bench/keras_fit.py's "floor + raw MPI": the ops of a step wait until `burst` of them
    # have come, then complete together from another thread. Inside tf.function they must
    # not be chained in program order (the first would wait for the third for ever).
    burst_floor = _bench_ops.ops().tfring_async_burst_floor
    values = [np.full(4, i, np.float32) for i in range(3)]

    @tf.function
    def step(xs):
        return [burst_floor(x, burst=len(xs)) + 1 for x in xs]

    for _ in range(2):  # the second burst after the first
        got = step([tf.constant(v) for v in values])
        for g, v in zip(got, values):
            np.testing.assert_array_equal(g.numpy(), v + 1)
    np.testing.assert_array_equal(burst_floor(tf.constant([2.5]), burst=1).numpy(), [2.5])
