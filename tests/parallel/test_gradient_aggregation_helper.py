"""LocalGradientAggregationHelper with Horovod's arguments: sums passes locally, reduces them
with the caller's allreduce_func every N passes, applies on those steps only; eager and TF1."""

import numpy as np
import pytest
import tensorflow as tf

import tfring
from tfring import LocalGradientAggregationHelper as Helper

v1 = tf.compat.v1


def sum_over_ranks(grads, variables):
    return tfring.grouped_allreduce(grads, op=tfring.Sum)


def pass_gradients(rank, k):
    """Rank `rank`'s gradients in pass k, for the shared and the local variable."""
    return np.array([rank + 1.0, k]), np.array([2.0 * rank + k])


@pytest.mark.parametrize("average", [False, True], ids=["sum", "average"])
def test_eager_reduces_every_second_pass(average, rank, size):
    shared, local = tf.Variable([0.0, 0.0], dtype=tf.float64), tf.Variable([0.0], tf.float64)
    helper = Helper(backward_passes_per_step=2, allreduce_func=sum_over_ranks,
                    sparse_as_dense=False, average_aggregated_gradients=average, rank=rank,
                    optimizer_type=Helper._OPTIMIZER_TYPE_KERAS)
    helper.register_local_var(local)
    applied = []
    for k in (1, 2):
        g_shared, g_local = pass_gradients(rank, k)
        out = helper.compute_gradients([tf.constant(g_shared), tf.constant(g_local)],
                                       [shared, local])
        helper.apply_gradients(lambda: applied.append(k), None)
        if k == 1:
            np.testing.assert_allclose(out[0].numpy(), [0.0, 0.0])  # not an update step
            assert applied == []
    divisor = 2.0 if average else 1.0
    everyone = sum(pass_gradients(r, 1)[0] + pass_gradients(r, 2)[0] for r in range(size))
    np.testing.assert_allclose(out[0].numpy(), everyone / divisor)
    mine = pass_gradients(rank, 1)[1] + pass_gradients(rank, 2)[1]
    np.testing.assert_allclose(out[1].numpy(), mine / divisor / size)  # local: not reduced
    assert applied == [2]


@pytest.mark.parametrize("init_first", [False, True], ids=["graph_first", "init_first"])
def test_tf1_graph_applies_on_update_steps(init_first, rank, size):
    # init_first: the initializers ran before the helper made its sums (Horovod's TF1
    # benchmark order); they initialize themselves on the first run.
    with tf.Graph().as_default():
        w = v1.get_variable("w", initializer=tf.constant([1.0, 1.0], tf.float64),
                            use_resource=True)
        session = v1.Session()
        if init_first:
            session.run([v1.global_variables_initializer(), v1.local_variables_initializer()])
        step = v1.placeholder(tf.float64, [])
        grad = tf.stack([tf.constant(rank + 1.0, tf.float64), step])
        helper = Helper(2, sum_over_ranks, False, False, rank,
                        Helper._OPTIMIZER_TYPE_LEGACY)
        grads = helper.compute_gradients([grad], [w])
        opt = v1.train.GradientDescentOptimizer(0.5)
        train_op = helper.apply_gradients(lambda: opt.apply_gradients([(grads[0], w)]), opt)
        with session:
            if not init_first:
                session.run([v1.global_variables_initializer(),
                             v1.local_variables_initializer()])
            session.run(train_op, {step: 1.0})
            np.testing.assert_allclose(session.run(w), [1.0, 1.0])
            session.run(train_op, {step: 2.0})
            total = np.array([2.0 * sum(r + 1 for r in range(size)), 3.0 * size])
            np.testing.assert_allclose(session.run(w), 1.0 - 0.5 * total)


def test_bad_arguments_say_which():
    with pytest.raises(ValueError, match="optimizer_type"):
        Helper(2, sum_over_ranks, False, False, 0, "keras")
    with pytest.raises(ValueError, match="backward_passes_per_step"):
        Helper(0, sum_over_ranks, False, False, 0, Helper._OPTIMIZER_TYPE_KERAS)
    with pytest.raises(ValueError, match="compute_gradients first"):
        Helper(2, sum_over_ranks, False, False, 0,
               Helper._OPTIMIZER_TYPE_KERAS).apply_gradients(lambda: None, None)
