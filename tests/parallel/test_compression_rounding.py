"""fp16 compression really sends float16: a gradient that float16 rounds arrives rounded.

Every rank's gradient is 1 + 2**-12, which float32 holds and float16 rounds to 1.0. One SGD
step with learning rate 1 from 0 leaves -1.0 exactly with Compression.fp16 and -(1 + 2**-12)
without, in each wrapper: the gradient tape, the Keras optimizer and the TF1 optimizer. A
tolerance-based comparison cannot tell the two apart; these exact ones can.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfring
import tfring.keras as hvd_keras

GRAD = np.float32(1.0 + 2.0 ** -12)
ROUNDED = {"fp16": np.float32(1.0), "none": GRAD}
COMPRESSIONS = {"fp16": tfring.Compression.fp16, "none": tfring.Compression.none}


def test_the_value_is_one_float16_rounds():
    assert np.float16(GRAD) == np.float16(1.0) and GRAD != np.float32(1.0)


@pytest.mark.parametrize("compression", ["fp16", "none"])
def test_gradient_tape(compression):
    v = tf.Variable(tf.zeros([4]))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(v * GRAD)
    tape = tfring.DistributedGradientTape(tape, compression=COMPRESSIONS[compression])
    (grad,) = tape.gradient(loss, [v])
    np.testing.assert_array_equal(grad.numpy(), np.full(4, ROUNDED[compression]))


@pytest.mark.parametrize("compression", ["fp16", "none"])
def test_keras_optimizer(compression):
    v = keras.Variable(np.zeros(4, np.float32))
    opt = hvd_keras.DistributedOptimizer(keras.optimizers.SGD(1.0),
                                         compression=COMPRESSIONS[compression])
    opt.apply_gradients([(tf.fill([4], GRAD), v)])
    np.testing.assert_array_equal(np.asarray(v), np.full(4, -ROUNDED[compression]))


@pytest.mark.parametrize("compression", ["fp16", "none"])
def test_tf1_optimizer(compression):
    with tf.Graph().as_default():
        v = tf.compat.v1.get_variable("v", initializer=tf.zeros([4]))
        loss = tf.reduce_sum(v * GRAD)
        opt = tfring.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0),
                                          compression=COMPRESSIONS[compression])
        step = opt.minimize(loss)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(step)
            np.testing.assert_array_equal(session.run(v), np.full(4, -ROUNDED[compression]))
