"""allgather, broadcast, broadcast_variables and the object helpers against numpy."""

import numpy as np
import pytest
import tensorflow as tf

import tfring
from _util import MODES, XLA_MODES, rank_input, run

DTYPES = [tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64, tf.float16, tf.bfloat16,
          tf.float32, tf.float64, tf.bool]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_allgather_uneven_first_dimension(dtype, mode, rank, size):
    shape_of = lambda r: (r + 1, 2, 3)  # noqa: E731
    mine = rank_input(rank, shape_of(rank), dtype)
    got = run(mode, lambda x: tfring.allgather(tf.cast(x, dtype)), mine)
    want = np.concatenate([rank_input(r, shape_of(r), dtype) for r in range(size)])
    np.testing.assert_array_equal(np.asarray(got).astype(want.dtype), want)


def test_allgather_rank_with_no_rows(rank, size):
    rows = 0 if rank == 0 else 2
    got = tfring.allgather(tf.fill([rows, 2], rank), name="some_empty").numpy()
    want = np.concatenate([np.full((0 if r == 0 else 2, 2), r) for r in range(size)])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mode", XLA_MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_broadcast_from_every_root(dtype, mode, rank, size):
    mine = rank_input(rank, (4, 3), dtype)

    def fn(x):
        x = tf.cast(x, dtype)
        return [tfring.broadcast(x, root) for root in range(size)]

    got = run(mode, fn, mine)
    for root in range(size):
        want = rank_input(root, (4, 3), dtype)
        np.testing.assert_array_equal(np.asarray(got[root]).astype(want.dtype), want)


def test_broadcast_variables_eager(rank, size):
    variables = [tf.Variable(tf.fill([3], float(rank))), tf.Variable(rank * 10)]
    tfring.broadcast_variables(variables, root_rank=size - 1)
    np.testing.assert_array_equal(variables[0].numpy(), [size - 1] * 3)
    assert variables[1].numpy() == (size - 1) * 10


def test_broadcast_variables_graph(rank, size):
    with tf.Graph().as_default():
        v = tf.compat.v1.Variable(tf.fill([2], float(rank)))
        op = tfring.broadcast_variables([v], root_rank=0)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(op)
            np.testing.assert_array_equal(session.run(v), [0.0, 0.0])


def test_allgather_object(rank, size):
    got = tfring.allgather_object({"rank": rank, "payload": "x" * rank})
    assert got == [{"rank": r, "payload": "x" * r} for r in range(size)]


def test_broadcast_object(rank, size):
    got = tfring.broadcast_object({"from": rank, "list": list(range(rank))}, root_rank=size - 1)
    assert got == {"from": size - 1, "list": list(range(size - 1))}
