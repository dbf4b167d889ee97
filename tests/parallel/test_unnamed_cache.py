"""Unnamed eager calls (what Horovod scripts write) skip negotiation after the first call at
a line: their responses are cached by call site, since their own names ("unnamed.<n>")
never recur. Results stay exact whatever changes at the line, and pairing stays by order
where it must (grouped calls, joined ranks, a call made on one rank only)."""

import json

import numpy as np
import pytest
import tensorflow as tf

import tfring
from _util import rank_input


def _sum_over_ranks(shape, dtype, salt, size):
    return np.sum([rank_input(10 * r + salt, shape, dtype) for r in range(size)], axis=0)


def _reduce(x):
    return tfring.allreduce(tf.constant(x), op=tfring.Sum)  # one call site for every call


def test_repeated_calls_at_one_line_stay_exact_as_shapes_and_dtypes_change(rank, size):
    cases = [((3,), tf.float32)] * 4 + [((2, 2), tf.float32)] * 3 + [((5,), tf.int32)] * 3 + \
            [((3,), tf.float32)] * 2
    for salt, (shape, dtype) in enumerate(cases):
        got = _reduce(rank_input(10 * rank + salt, shape, dtype)).numpy()
        np.testing.assert_array_equal(got, _sum_over_ranks(shape, dtype, salt, size))


def _reduce_here(x):
    return tfring.allreduce(tf.constant(x), op=tfring.Sum)  # a line no other test calls


def test_unnamed_calls_appear_under_their_call_site_in_the_timeline(tmp_path, rank, size):
    # The first call at the line is negotiated under its own name, later ones wait on the
    # line's cache slot: one row for all of them, the line's.
    path = tmp_path / "timeline.json"
    tfring.start_timeline(str(path))
    for _ in range(5):
        np.testing.assert_array_equal(_reduce_here(np.ones(4, np.float32)).numpy(),
                                      np.full(4, size))
    tfring.stop_timeline()
    if rank != 0:
        return
    rows = [e["args"]["name"] for e in json.loads(path.read_text())
            if e.get("name") == "thread_name"]
    assert rows == [rows[0]] and rows[0].startswith("unnamed@test_unnamed_cache.py:"), rows


def test_two_call_sites_interleaved(rank, size):
    for salt in range(6):
        a = tfring.allreduce(tf.constant(rank_input(10 * rank + salt, (3,), tf.float32)),
                             op=tfring.Sum)
        b = tfring.allreduce(tf.constant(rank_input(10 * rank + salt, (2,), tf.int64)),
                             op=tfring.Max)
        np.testing.assert_array_equal(a.numpy(), _sum_over_ranks((3,), tf.float32, salt, size))
        np.testing.assert_array_equal(
            b.numpy(), np.max([rank_input(10 * r + salt, (2,), tf.int64) for r in range(size)],
                              axis=0))


def test_grouped_unnamed_calls_pair_by_order(rank, size):
    for salt in range(4):
        xs = [rank_input(10 * rank + salt + i, (i + 1,), tf.float32) for i in range(3)]
        outs = tfring.grouped_allreduce([tf.constant(x) for x in xs], op=tfring.Sum)
        for i, out in enumerate(outs):
            np.testing.assert_array_equal(out.numpy(),
                                          _sum_over_ranks((i + 1,), tf.float32, salt + i, size))


def test_unnamed_calls_while_a_rank_has_joined_then_a_new_line(rank, size):
    # Rank r makes r + 1 calls at one line, then joins; the joined ranks contribute zeros.
    # Afterwards every rank makes a call at another line, negotiated by its name: the
    # ranks' counts of unnamed calls must agree for it to pair.
    for salt in range(rank + 1):
        got = _reduce(rank_input(10 * rank + salt, (3,), tf.float32)).numpy()
        want = np.sum([rank_input(10 * r + salt, (3,), tf.float32)
                       for r in range(size) if r + 1 > salt], axis=0)
        np.testing.assert_array_equal(got, want)
    assert tfring.join() == size - 1
    after = tfring.allreduce(tf.constant([float(rank)]), op=tfring.Sum).numpy()
    np.testing.assert_array_equal(after, [float(sum(range(size)))])


@pytest.mark.parametrize("reps", [3])
def test_a_line_reached_by_one_rank_only_is_an_error_naming_both_calls(rank, size, reps):
    for _ in range(reps):  # cache the common line first
        _reduce(np.ones(2, np.float32))
    if rank == 0:
        with pytest.raises(tf.errors.OpError, match=r"test_unnamed_cache\.py:\d+"):
            tfring.allreduce(tf.ones([7]), op=tfring.Sum)  # only rank 0 gets here
    else:
        with pytest.raises(tf.errors.OpError, match=r"test_unnamed_cache\.py:\d+"):
            _reduce(np.ones(2, np.float32))
    tfring.barrier()
