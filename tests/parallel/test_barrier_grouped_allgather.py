"""grouped_allgather, barrier and broadcast_ against numpy, in every mode."""

import time

import numpy as np
import pytest
import tensorflow as tf

import tfring
from _util import MODES, rank_input, run


@pytest.mark.parametrize("mode", MODES)
def test_grouped_allgather_mixed_dtypes_uneven_rows(mode, rank, size):
    a = rank_input(rank, (rank + 1, 3), tf.float32)
    b = rank_input(rank, (2 * rank, 2), tf.int64)  # rank 0 sends no rows
    c = rank_input(rank, (2,), tf.bool)
    got = run(mode, lambda x, y, z: tfring.grouped_allgather([x, y, z], name=f"gag.{mode}"),
              a, b, c)
    want = [np.concatenate([rank_input(r, (r + 1, 3), tf.float32) for r in range(size)]),
            np.concatenate([rank_input(r, (2 * r, 2), tf.int64) for r in range(size)]),
            np.concatenate([rank_input(r, (2,), tf.bool) for r in range(size)])]
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_grouped_allgather_gradient(rank, size):
    x = tf.constant(rank_input(rank, (rank + 1, 2), tf.float32))
    y = tf.constant(rank_input(rank, (3,), tf.float64))
    with tf.GradientTape() as tape:
        tape.watch([x, y])
        gx, gy = tfring.grouped_allgather([x, y], name="gag.grad")
        loss = tf.reduce_sum(gx * 2.0) + tf.cast(tf.reduce_sum(gy * 3.0), tf.float32)
    dx, dy = tape.gradient(loss, [x, y])
    # Horovod's definition: the upstream gradient averaged over ranks, then my rows.
    np.testing.assert_array_equal(dx.numpy(), np.full((rank + 1, 2), 2.0))
    np.testing.assert_array_equal(dy.numpy(), np.full(3, 3.0))


def test_grouped_allgather_rejects_scalars():
    with pytest.raises(ValueError, match="'gag.scalar.1' is a scalar"):
        tfring.grouped_allgather([tf.ones([2]), tf.constant(1.0)], name="gag.scalar")


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_barrier_waits_for_every_rank(mode, rank, size):
    def wait():
        return tfring.barrier(name=f"barrier.{mode}")
    step = tf.function(wait) if mode == "function" else wait
    step()  # line everyone up first
    if rank == size - 1:
        time.sleep(0.5)
    entered = time.time()  # every rank on one host: one clock
    step()
    left = time.time()
    # No rank left the barrier before the last one entered it, however the ranks were
    # scheduled around it.
    times = tfring.allgather(np.array([[entered, left]]), name=f"barrier.times.{mode}").numpy()
    assert times[:, 1].min() >= times[:, 0].max(), times
    # And everyone got past it: a collective after it works.
    np.testing.assert_array_equal(
        tfring.allreduce(tf.ones([2]), op=tfring.Sum, name=f"after.{mode}").numpy(),
        np.full(2, float(size)))


def test_barrier_in_a_tf1_graph(rank, size):
    # As the eager test above, in a session: the last rank runs the barrier op 0.5 s late;
    # no rank's run of it may end before that rank's began.
    with tf.Graph().as_default():
        op = tfring.barrier(name="barrier.graph")
        assert isinstance(op, tf.Operation)
        with tf.compat.v1.Session() as session:
            session.run(op)  # line everyone up first
            if rank == size - 1:
                time.sleep(0.5)
            entered = time.time()
            session.run(op)
            left = time.time()
            session.run(op)  # and it runs again, every rank
    times = tfring.allgather(np.array([[entered, left]]), name="barrier.graph.times").numpy()
    assert times[:, 1].min() >= times[:, 0].max(), times
