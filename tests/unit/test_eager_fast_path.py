"""One process (size 1): an eager allreduce goes through TensorFlow's own fast path
(tfring/_ops/eager_call.py), and behaves as it did through the generated op wrapper: results,
gradients, errors, and the wrapper's path where the fast one declines."""

import numpy as np
import pytest
import tensorflow as tf

import tfring
from tfring._ops import eager_call as _eager_call


class _NoWrapper:
    """Stands in for tfring._process.library: any use of the generated wrappers fails the
    test."""

    @staticmethod
    def ops():
        raise AssertionError("the generated op wrapper was used")


@pytest.fixture
def fast_path_only(monkeypatch):
    tfring.init()
    monkeypatch.setattr(_eager_call, "library", _NoWrapper)


def test_named_unnamed_and_scaled_calls_take_the_fast_path(fast_path_only):
    x = tf.constant([1.5, -2.0])
    np.testing.assert_array_equal(tfring.allreduce(x, name="fast.named").numpy(), x.numpy())
    np.testing.assert_array_equal(tfring.allreduce(x, op=tfring.Sum).numpy(), x.numpy())
    # Integer factors are converted: an int for a float attribute would make the fast path
    # decline (and use the wrapper, which this test forbids).
    scaled = tfring.allreduce(x, op=tfring.Sum, prescale_factor=2, postscale_factor=3,
                              name="fast.scaled")
    np.testing.assert_array_equal(scaled.numpy(), x.numpy() * 6)
    ints = tfring.allreduce(tf.constant([7, -7]), op=tfring.Average, name="fast.int")
    np.testing.assert_array_equal(ints.numpy(), [7, -7])


def test_the_fast_path_records_the_gradient_with_every_attribute(fast_path_only):
    x = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        # The gradient function reads the op's attributes (its process set, its factors)
        # from what the call passed: none may be left to the op's defaults.
        y = tfring.allreduce(x * x, op=tfring.Sum, postscale_factor=0.5, name="fast.grad")
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), x.numpy())  # d(x^2 / 2) = x


def test_where_the_fast_path_declines_the_wrapper_computes_the_same(monkeypatch):
    tfring.init()

    def decline(*args):
        raise _eager_call._Fallback("declined")

    monkeypatch.setattr(_eager_call, "_execute", decline)
    got = tfring.allreduce(tf.constant([4.0]), op=tfring.Sum, postscale_factor=0.25,
                           name="fast.declined")
    np.testing.assert_array_equal(got.numpy(), [1.0])


def test_an_error_from_the_fast_path_is_tensorflows_with_the_runtimes_message():
    tfring.init()
    tfring.shutdown()
    try:
        with pytest.raises(tf.errors.FailedPreconditionError) as info:
            tfring.allreduce(tf.constant([1.0]), name="fast.after_shutdown")
        assert "not been initialized" in info.value.message
        assert "[Op:" not in info.value.message  # TensorFlow's wrapping, removed as before
    finally:
        tfring.init()
