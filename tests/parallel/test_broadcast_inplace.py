"""broadcast_ (in place) on every kind of variable, eagerly, in tf.function and in TF1
graphs: the variables take the root's values, and the returned values are the root's."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfring


def _check(values, variables, root):
    for got, v in zip(values, variables):
        np.testing.assert_array_equal(np.asarray(got), np.full(v.shape, float(root)))
        np.testing.assert_array_equal(np.asarray(v.numpy() if hasattr(v, "numpy") else v),
                                      np.full(v.shape, float(root)))


def test_resource_and_keras_variables_eagerly(rank, size):
    root = size - 1
    v = tf.Variable(tf.fill([3], float(rank)))
    w = tf.Variable(tf.fill([2, 2], rank))
    k = keras.Variable(np.full((2,), float(rank), np.float32))
    values = tfring.broadcast_([v, w, k], root_rank=root)
    _check(values, [v, w], root)
    np.testing.assert_array_equal(np.asarray(k), np.full(2, float(root)))
    np.testing.assert_array_equal(values[2].numpy(), np.full(2, float(root)))
    single = tf.Variable([float(rank)])
    assert tfring.broadcast_(single, 0).numpy()[0] == 0.0 and single.numpy()[0] == 0.0


def test_inside_tf_function(rank, size):
    v = tf.Variable(tf.fill([4], float(rank)))

    @tf.function
    def sync():
        return tfring.broadcast_([v], root_rank=0)

    values = sync()
    _check(values, [v], 0)


@pytest.mark.parametrize("use_resource", [True, False], ids=["resource", "reference"])
def test_tf1_variables_in_a_session(use_resource, rank, size):
    root = size - 1
    with tf.Graph().as_default():
        v = tf.compat.v1.get_variable("v", initializer=tf.fill([3], float(rank)),
                                      use_resource=use_resource)
        values = tfring.broadcast_([v], root_rank=root)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            got = session.run(values)
            after = session.run(v)
    np.testing.assert_array_equal(got[0], np.full(3, float(root)))
    np.testing.assert_array_equal(after, np.full(3, float(root)))


def test_rejects_tensors(rank, size):
    with pytest.raises(TypeError, match="broadcast_ works in place on variables"):
        tfring.broadcast_([tf.ones([2])], 0)
