"""Bad input fails on every rank with a message naming the tensor, the problem and ranks."""

import numpy as np
import pytest
import tensorflow as tf

import tfring


def test_shape_mismatch_raises_on_every_rank(rank, size):
    x = tf.zeros([2 + rank])
    with pytest.raises(tf.errors.FailedPreconditionError,
                       match=r"Mismatched shapes for tensor 'bad_shape': rank 0 sent \[2\], "
                             r"rank 1 sent \[3\]"):
        tfring.allreduce(x, name="bad_shape")


def test_shape_mismatch_inside_function(rank, size):
    @tf.function
    def f():
        return tfring.allreduce(tf.zeros([2, 1 + rank]), name="bad_shape_fn")

    with pytest.raises(tf.errors.FailedPreconditionError,
                       match=r"'bad_shape_fn': rank 0 sent \[2,1\], rank 1 sent \[2,2\]"):
        f()


def test_grouped_allreduce_mismatches_name_the_tensor(rank, size):
    # A grouped op travels as one unit: the ranks' lists must agree tensor by tensor, and
    # the error names the first that differs, whether its shape, its dtype or the count.
    with pytest.raises(tf.errors.FailedPreconditionError,
                       match=r"Mismatched shapes for tensor 'bad_group\.1': rank 0 sent \[3\], "
                             r"rank 1 sent \[4\]"):
        tfring.grouped_allreduce([tf.zeros([2]), tf.zeros([3 + rank])], name="bad_group")
    with pytest.raises(tf.errors.FailedPreconditionError,
                       match=r"Mismatched data types for tensor 'bad_group_dtype\.0': rank 0 "
                             r"sent float32, rank 1 sent float64"):
        tfring.grouped_allreduce([tf.zeros([2], tf.float32 if rank == 0 else tf.float64),
                                  tf.zeros([3], tf.int32)], name="bad_group_dtype")
    with pytest.raises(tf.errors.FailedPreconditionError,
                       match=r"Mismatched tensor counts for 'bad_group_count': rank 0 sent a "
                             r"grouped allreduce of 2 tensors, rank 1 sent a grouped "
                             r"allreduce of 3 tensors"):
        tfring.grouped_allreduce([tf.zeros([2])] * (2 + min(rank, 1)), name="bad_group_count")
    # Then the same names, agreed, work.
    out = tfring.grouped_allreduce([tf.fill([2], float(rank)), tf.ones([3], tf.int32)],
                                   op=tfring.Sum, name="bad_group_dtype")
    np.testing.assert_array_equal(out[0].numpy(), np.full(2, float(sum(range(size)))))
    np.testing.assert_array_equal(out[1].numpy(), np.full(3, size))


def test_dtype_mismatch(rank, size):
    x = tf.zeros([2], dtype=tf.float32 if rank == 0 else tf.int32)
    with pytest.raises(tf.errors.FailedPreconditionError,
                       match=r"Mismatched data types for tensor 'bad_dtype': rank 0 sent "
                             r"float32, rank 1 sent int32"):
        tfring.allreduce(x, name="bad_dtype")


def test_reduce_op_mismatch(rank, size):
    op = tfring.Sum if rank == 0 else tfring.Max
    with pytest.raises(tf.errors.FailedPreconditionError,
                       match=r"Mismatched reduce ops for tensor 'bad_op': rank 0 sent Sum, "
                             r"rank 1 sent Max"):
        tfring.allreduce(tf.zeros([2]), op=op, name="bad_op")


def test_root_rank_mismatch(rank, size):
    with pytest.raises(tf.errors.FailedPreconditionError,
                       match=r"Mismatched root ranks for tensor 'bad_root': rank 0 sent "
                             r"root_rank=0, rank 1 sent root_rank=1"):
        tfring.broadcast(tf.zeros([2]), root_rank=rank, name="bad_root")


def test_allgather_trailing_dimension_mismatch(rank, size):
    with pytest.raises(tf.errors.FailedPreconditionError,
                       match=r"'bad_gather': rank 0 sent \[1,2\], rank 1 sent \[1,3\].*"
                             r"every dimension but the first"):
        tfring.allgather(tf.zeros([1, 2 + rank]), name="bad_gather")


def test_collective_kind_mismatch(rank, size):
    with pytest.raises(tf.errors.FailedPreconditionError,
                       match=r"Mismatched collectives for tensor 'bad_kind': rank 0 sent "
                             r"allreduce, rank 1 sent broadcast"):
        if rank == 0:
            tfring.allreduce(tf.zeros([2]), name="bad_kind")
        else:
            tfring.broadcast(tf.zeros([2]), 0, name="bad_kind")


def test_runtime_healthy_after_errors(rank, size):
    got = tfring.allreduce(tf.constant([1.0]), op=tfring.Sum, name="after_errors")
    assert got.numpy()[0] == size


def test_root_rank_out_of_range(rank, size):
    with pytest.raises(ValueError, match=r"`root_rank` must be in \[0, size\) = \[0, "
                                         rf"{size}\)\. Received: root_rank={size}"):
        tfring.broadcast(tf.zeros([1]), root_rank=size)
    with pytest.raises(ValueError, match="root_rank=-1"):
        tfring.broadcast_variables([tf.Variable(1.0)], root_rank=-1)


def test_root_rank_out_of_range_in_graph(rank, size):
    # Built before the check could know the size? The kernel checks again when it runs.
    with tf.Graph().as_default():
        op = tfring._process.library.ops().tfring_broadcast(tf.zeros([1]), root_rank=size + 3,
                                                    tensor_name="graph_root")
        with tf.compat.v1.Session() as session:
            with pytest.raises(tf.errors.InvalidArgumentError,
                               match=rf"Received: root_rank={size + 3}.*'graph_root'"):
                session.run(op)


def test_unsupported_dtypes(rank, size):
    with pytest.raises(TypeError, match="does not support dtype string"):
        tfring.allreduce(tf.constant(["a"]))
    with pytest.raises(TypeError, match="does not support dtype complex64"):
        tfring.allreduce(tf.zeros([1], tf.complex64))
    with pytest.raises(TypeError, match="allreduce does not support dtype bool"):
        tfring.allreduce(tf.constant([True]))
    with pytest.raises(TypeError, match="broadcast does not support dtype string"):
        tfring.broadcast(tf.constant(["a"]), 0)


def test_scalar_allgather_is_rejected(rank, size):
    with pytest.raises(ValueError, match="rank >= 1"):
        tfring.allgather(tf.constant(1.0))


def test_invalid_op(rank, size):
    with pytest.raises(ValueError, match="`op` must be one of"):
        tfring.allreduce(tf.zeros([1]), op=42)
    np.testing.assert_array_equal(
        tfring.allreduce(tf.constant([2.0]), op=tfring.Sum, name="after_invalid").numpy(),
        [2.0 * size])
