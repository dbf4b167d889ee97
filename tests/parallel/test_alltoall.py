"""alltoall against numpy: uneven splits (some zero), equal split default, modes, gradient."""

import numpy as np
import pytest
import tensorflow as tf

import tfring
from _util import MODES, rank_input, run


def splits_of(q, size):
    """Rank q sends (q + r) % 3 rows to rank r: uneven, some zero."""
    return [(q + r) % 3 for r in range(size)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [tf.float32, tf.int64, tf.bool], ids=lambda d: d.name)
def test_alltoall_uneven_splits(dtype, mode, rank, size):
    mine = splits_of(rank, size)
    x = rank_input(rank, (sum(mine), 2), dtype)
    got, received = run(mode, lambda t, s: tfring.alltoall(t, splits=s,
                                                            name=f"a2a.{dtype.name}.{mode}"),
                        x, np.array(mine, dtype=np.int64))
    want, want_splits = [], []
    for q in range(size):
        theirs = splits_of(q, size)
        xq = rank_input(q, (sum(theirs), 2), dtype)
        start = sum(theirs[:rank])
        want.append(xq[start:start + theirs[rank]])
        want_splits.append(theirs[rank])
    np.testing.assert_array_equal(got, np.concatenate(want))
    np.testing.assert_array_equal(received, want_splits)


def test_alltoall_equal_split_by_default(rank, size):
    x = tf.reshape(tf.range(2 * size, dtype=tf.float32) + 100 * rank, [2 * size, 1])
    got = tfring.alltoall(x, name="a2a.equal")  # without splits: the rows alone, as Horovod
    want = np.concatenate([np.arange(2 * rank, 2 * rank + 2) + 100 * q for q in range(size)])
    np.testing.assert_array_equal(got.numpy()[:, 0], want)


def test_alltoall_received_splits_are_int32_and_concatenate(rank, size):
    got, received = tfring.alltoall(tf.ones([size, 2]), splits=[1] * size, name="a2a.i32")
    assert received.dtype == tf.int32
    both = tf.concat([received, tf.shape(got)], 0)  # Horovod-style code mixes the two
    np.testing.assert_array_equal(both.numpy(), [1] * size + [size, 2])


def test_alltoall_gradient_goes_back_to_the_sender(rank, size):
    mine = splits_of(rank, size)
    x = tf.constant(rank_input(rank, (sum(mine), 3), tf.float32))
    with tf.GradientTape() as tape:
        tape.watch(x)
        got, _ = tfring.alltoall(x, splits=mine, name="a2a.grad")
        loss = tf.reduce_sum(got * float(rank + 1))  # rows landing on rank r weigh r + 1
    grad = tape.gradient(loss, x).numpy()
    want = np.concatenate([np.full((mine[r], 3), float(r + 1)) for r in range(size)])
    np.testing.assert_array_equal(grad, want)


def test_alltoall_errors(rank, size):
    with pytest.raises(tf.errors.InvalidArgumentError, match="splits add up to 1 rows but the "
                                                             "tensor has 4"):
        tfring.alltoall(tf.ones([4]), splits=[1] + [0] * (size - 1), name="a2a.badsum")
    with pytest.raises(tf.errors.InvalidArgumentError, match="one row count per rank"):
        tfring.alltoall(tf.ones([4]), splits=[4] * (size + 1), name="a2a.badlen")
    with pytest.raises(tf.errors.InvalidArgumentError, match="do not split evenly"):
        tfring.alltoall(tf.ones([size + 1]), name="a2a.uneven")
