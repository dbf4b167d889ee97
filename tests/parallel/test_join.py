"""join(): ranks that run out of data early. Rank r runs r + 1 steps here, so while the
higher ranks go on, the lower ones have joined and contribute the identity of each
reduction; results are checked against numpy over the ranks that still had data."""

import threading
import time

import numpy as np
import pytest
import tensorflow as tf

import tfring
from _util import rank_input


def _steps(r):
    return r + 1


def _with_data(step, size):
    return [r for r in range(size) if _steps(r) > step]


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_allreduce_ops_with_joined_ranks(mode, rank, size):
    def step_fn(x, y):
        return (tfring.allreduce(x, op=tfring.Average, name=f"join.avg.{mode}"),
                tfring.allreduce(x, op=tfring.Sum, name=f"join.sum.{mode}"),
                tfring.allreduce(y, op=tfring.Min, name=f"join.min.{mode}"),
                tfring.allreduce(y, op=tfring.Max, name=f"join.max.{mode}"),
                tfring.grouped_allreduce([x, y], op=tfring.Sum, name=f"join.grouped.{mode}"))
    step = tf.function(step_fn) if mode == "function" else step_fn

    def inputs(r, s):
        return rank_input(10 * r + s, (3, 2), tf.float32), rank_input(10 * r + s, (4,), tf.int32)

    for s in range(_steps(rank)):
        x, y = inputs(rank, s)
        avg, total, low, high, (gx, gy) = [tf.nest.map_structure(lambda t: t.numpy(), o)
                                           for o in step(tf.constant(x), tf.constant(y))]
        present = _with_data(s, size)
        xs = [inputs(r, s)[0] for r in present]
        ys = [inputs(r, s)[1] for r in present]
        np.testing.assert_allclose(avg, np.mean(xs, axis=0), rtol=1e-6)
        np.testing.assert_array_equal(total, np.sum(xs, axis=0))
        np.testing.assert_array_equal(low, np.min(ys, axis=0))
        np.testing.assert_array_equal(high, np.max(ys, axis=0))
        np.testing.assert_array_equal(gx, np.sum(xs, axis=0))
        np.testing.assert_array_equal(gy, np.sum(ys, axis=0))
    assert tfring.join() == size - 1
    # After every rank has joined, collectives work as before.
    assert tfring.allreduce(tf.constant(1.0), op=tfring.Sum, name="join.after").numpy() == size


def test_unnamed_eager_calls_pair_after_ranks_joined_at_different_steps(rank, size):
    # A Horovod loop: an unnamed logging allreduce per step, join(), then another unnamed
    # call. Rank r makes r + 1 calls before joining; the joined ranks' counts catch up, so
    # the call after the join pairs on every rank.
    for s in range(_steps(rank)):
        total = tfring.allreduce(tf.constant(1.0), op=tfring.Sum).numpy()
        assert total == len(_with_data(s, size))
    tfring.join()
    after = tfring.allreduce(tf.constant(float(rank)), op=tfring.Sum).numpy()
    assert after == sum(range(size))


def test_allgather_and_broadcast_with_joined_ranks(rank, size):
    for s in range(_steps(rank)):
        x = np.full((rank + 1, 2), 10 * rank + s, np.int64)
        gathered = tfring.allgather(x, name="join.gather").numpy()
        want = np.concatenate([np.full((r + 1, 2), 10 * r + s, np.int64)
                               for r in _with_data(s, size)])
        np.testing.assert_array_equal(gathered, want)
        got = tfring.broadcast(tf.constant([float(rank)]), size - 1, name="join.bcast").numpy()
        assert got[0] == size - 1
    assert tfring.join() == size - 1


def _agreed_last_after_rank_0(last, size):
    """The ranks other than 0 join in any order after rank 0: all agree on the last one."""
    assert isinstance(last, tf.Tensor) and last.dtype == tf.int32  # as Horovod's join()
    last = int(last)
    agreed = tfring.allgather(np.array([last]), name="join.agreed_last").numpy()
    assert 0 < last < size and (agreed == last).all(), agreed


def test_broadcast_from_a_joined_root_fails_on_every_remaining_rank(rank, size):
    if rank == 0:
        _agreed_last_after_rank_0(tfring.join(), size)
        return
    with pytest.raises(tf.errors.FailedPreconditionError,
                       match="its root rank 0 has joined"):
        tfring.broadcast(tf.constant([1.0]), 0, name="join.bad_root")
    _agreed_last_after_rank_0(tfring.join(), size)


def test_reducescatter_with_a_joined_rank_fails_on_every_remaining_rank(rank, size):
    # As Horovod: a joined rank would be handed a block of the result no one uses.
    if rank == 0:
        _agreed_last_after_rank_0(tfring.join(), size)
        return
    try:
        with pytest.raises(tf.errors.FailedPreconditionError,
                           match=r"reducescatter 'join.rs' cannot run while rank\(s\) \[0\] "
                                 r"have joined"):
            tfring.reducescatter(tf.ones([4, 2]), name="join.rs")
    finally:  # rank 0 waits for every rank to join, whatever happened here
        last = tfring.join()
    _agreed_last_after_rank_0(last, size)


def test_joined_rank_cannot_submit(rank, size):
    if rank != 0:
        time.sleep(3.0)
        _agreed_last_after_rank_0(tfring.join(), size)
        return
    result = {}
    joiner = threading.Thread(target=lambda: result.update(last=tfring.join()))
    joiner.start()
    # The thread's join reaches the runtime within milliseconds; 2 s leaves a loaded machine
    # time to schedule it (a probe queued before it would not fail).
    time.sleep(2.0)
    with pytest.raises(tf.errors.FailedPreconditionError, match="rank 0 has joined"):
        tfring.allreduce(tf.ones(1), name="join.probe")
    joiner.join(60)
    _agreed_last_after_rank_0(result["last"], size)


def test_cached_ops_do_not_run_when_every_rank_has_joined(rank, size):
    # Joined ranks mark every cached op ready; with all joined, no rank has data for any of
    # them, and none may run (an integer Average would divide by zero ranks).
    for _ in range(2):  # the second call runs from the response cache
        got = tfring.allreduce(np.arange(7, dtype=np.int32), op=tfring.Average,
                               name="join.cached.int_average").numpy()
        np.testing.assert_array_equal(got, np.arange(7))
    for _ in range(2):
        # Ranks join in any order here: they must agree on which was last.
        last = int(tfring.join())
        agreed = tfring.allgather(np.array([last]), name="join.cached.last").numpy()
        assert 0 <= last < size and (agreed == last).all(), agreed
