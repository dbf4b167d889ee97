"""Gradients of allreduce, allgather and broadcast, checked against central differences.

The loss is global: L = sum over ranks of each rank's local loss. A finite difference
perturbs one element of one rank's input at a time (every rank evaluates L together), so
each rank ends with the numerical gradient of L with respect to its own input.

Horovod defines the allgather and broadcast gradients for the ranks' average loss, L / size
(their gradients average the upstream gradient over ranks), and allreduce's for L: tfring
keeps those definitions, so the first two are compared with the numerical gradient / size.
"""

import numpy as np
import pytest
import tensorflow as tf

import tfring

EPS = 1e-4


def local_loss_fn(kind, rank, size):
    weights = tf.constant(np.random.default_rng(7 + rank).normal(size=(3, 2)), tf.float64)
    if kind == "sum":
        return lambda x: tf.reduce_sum(weights * tfring.allreduce(x, op=tfring.Sum) ** 2)
    if kind == "average":
        return lambda x: tf.reduce_sum(weights * tfring.allreduce(x, op=tfring.Average) ** 2)
    if kind == "scaled":
        return lambda x: tf.reduce_sum(weights * tfring.allreduce(
            x, op=tfring.Sum, prescale_factor=0.5, postscale_factor=3.0) ** 2)
    if kind == "allgather":
        def loss(x):
            gathered = tfring.allgather(x)
            w = tf.constant(np.random.default_rng(11 + rank).normal(size=(3 * size, 2)),
                            tf.float64)
            return tf.reduce_sum(w * gathered ** 2)
        return loss
    if kind == "broadcast":
        return lambda x: tf.reduce_sum(weights * tfring.broadcast(x, root_rank=0) ** 3)
    raise ValueError(kind)


def numerical_gradient(loss, x, rank, size):
    grad = np.zeros_like(x)
    for owner in range(size):
        for index in np.ndindex(*x.shape):
            values = []
            for sign in (1.0, -1.0):
                xp = x.copy()
                if owner == rank:
                    xp[index] += sign * EPS
                total = tfring.allreduce(loss(tf.constant(xp)), op=tfring.Sum)
                values.append(float(total))
            if owner == rank:
                grad[index] = (values[0] - values[1]) / (2 * EPS)
    return grad


@pytest.mark.parametrize("in_function", [False, True], ids=["eager", "function"])
@pytest.mark.parametrize("kind", ["sum", "average", "scaled", "allgather", "broadcast"])
def test_gradient_matches_finite_differences(kind, in_function, rank, size):
    x = np.random.default_rng(rank).normal(size=(3, 2))
    loss = local_loss_fn(kind, rank, size)

    def analytic(xt):
        with tf.GradientTape() as tape:
            tape.watch(xt)
            value = loss(xt)
        return tape.gradient(value, xt)

    if in_function:
        analytic = tf.function(analytic)
    got = analytic(tf.constant(x)).numpy()
    want = numerical_gradient(loss, x, rank, size)
    if kind in ("allgather", "broadcast"):
        want = want / size
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_gradient_in_graph_mode(rank, size):
    with tf.Graph().as_default():
        x = tf.constant(np.full((2,), float(rank + 1)))
        y = tfring.allreduce(x, op=tfring.Sum)
        (grad,) = tf.gradients(tf.reduce_sum(y * (rank + 1.0)), [x])
        with tf.compat.v1.Session() as session:
            got = session.run(grad)
    # d/dx_r of sum_s (s+1) * sum(y) = sum over ranks of (s+1).
    np.testing.assert_allclose(got, [sum(s + 1.0 for s in range(size))] * 2)


def test_min_max_have_no_gradient(rank, size):
    x = tf.constant([1.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tfring.allreduce(x, op=tfring.Max, name="max_for_grad")
    with pytest.raises(ValueError, match="gradient for op=Average and Sum only"):
        tape.gradient(y, x)
