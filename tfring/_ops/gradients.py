"""Gradients of the collectives, with Horovod's definitions.

Horovod defines them for a loss that each rank computes and that ranks then average:
- allreduce / grouped_allreduce: the same reduction (op and scale factors) of the gradient;
- allgather / grouped_allgather: the gradient averaged over ranks, then this rank's rows;
- broadcast: the gradient averaged over ranks at the root, zero elsewhere;
- reducescatter: every rank's block gathered (times the set's size for Sum), times the op's
  scale factors;
- alltoall: the gradient sent back the way the rows came.
The collectives they run are named like any other (tfring/_ops/naming.py): from the graph when
differentiated in one, in call order when an eager tape computes them.
"""

import tensorflow as tf

from tfring._process import runtime
from tfring._ops.data_movement import allgather, alltoall
from tfring._ops.op_support import OP_NAMES, Average, Sum, set_size
from tfring._ops.reductions import allreduce, grouped_allreduce
from tfring._ops.process_sets import from_attr, global_process_set


def _differentiable_op(op, what):
    """The reduce op of a reducing op's node; only Average and Sum have a gradient."""
    reduce_op = op.get_attr("reduce_op")
    if reduce_op not in (Average, Sum):
        raise ValueError(f"tfring.{what} has a gradient for op=Average and Sum only, "
                         f"not op={OP_NAMES[reduce_op]}.")
    return reduce_op


def _set_rank(process_set):
    if process_set is global_process_set:
        return runtime.rank_op()
    return tf.constant(process_set.rank(), tf.int32)


@tf.RegisterGradient("TfringAllreduce")
def _allreduce_grad(op, grad):
    reduce_op = _differentiable_op(op, "allreduce")
    return allreduce(grad, op=reduce_op, prescale_factor=op.get_attr("prescale_factor"),
                     postscale_factor=op.get_attr("postscale_factor"),
                     process_set=from_attr(op.get_attr("process_set")))


@tf.RegisterGradient("TfringGroupedAllreduce")
def _grouped_allreduce_grad(op, *grads):
    reduce_op = _differentiable_op(op, "grouped_allreduce")
    return grouped_allreduce(list(grads), op=reduce_op,
                             prescale_factor=op.get_attr("prescale_factor"),
                             postscale_factor=op.get_attr("postscale_factor"),
                             process_set=from_attr(op.get_attr("process_set")))


def _gathered_input_grad(my_input, grad, process_set):
    # Horovod's definition: the upstream gradient averaged over ranks, then my rows of it.
    grad = allreduce(grad, op=Average, process_set=process_set)
    my_rows = tf.shape(my_input, out_type=tf.int64)[:1]
    rows = allgather(my_rows, process_set=process_set)
    start = tf.reduce_sum(rows[:tf.cast(_set_rank(process_set), tf.int64)])
    begin = tf.concat([[start], tf.zeros_like(tf.shape(grad, out_type=tf.int64)[1:])], 0)
    return tf.slice(grad, begin, tf.shape(my_input, out_type=tf.int64))


@tf.RegisterGradient("TfringAllgather")
def _allgather_grad(op, grad):
    return _gathered_input_grad(op.inputs[0], grad, from_attr(op.get_attr("process_set")))


@tf.RegisterGradient("TfringGroupedAllgather")
def _grouped_allgather_grad(op, *grads):
    process_set = from_attr(op.get_attr("process_set"))
    return [_gathered_input_grad(x, g, process_set) for x, g in zip(op.inputs, grads)]


@tf.RegisterGradient("TfringReducescatter")
def _reducescatter_grad(op, grad):
    reduce_op = _differentiable_op(op, "reducescatter")
    process_set = from_attr(op.get_attr("process_set"))
    gathered = allgather(grad, process_set=process_set)
    factor = op.get_attr("prescale_factor") * op.get_attr("postscale_factor")
    if reduce_op == Sum:
        gathered = gathered * tf.cast(set_size(process_set), gathered.dtype)
    return gathered * tf.cast(factor, gathered.dtype) if factor != 1.0 else gathered


@tf.RegisterGradient("TfringAlltoall")
def _alltoall_grad(op, grad, _received_splits_grad):
    # The rows I received from rank q came from q's rows sent to me: send the gradient back
    # the same way, with the received splits as the splits.
    back, _ = alltoall(grad, splits=op.outputs[1],
                       process_set=from_attr(op.get_attr("process_set")))
    return back, None


@tf.RegisterGradient("TfringBroadcast")
def _broadcast_grad(op, grad):
    # Horovod's definition: the gradient averaged over ranks, at the root only.
    averaged = allreduce(grad, op=Average, process_set=from_attr(op.get_attr("process_set")))
    is_root = tf.equal(runtime.rank_op(), op.get_attr("root_rank"))
    return averaged * tf.cast(is_root, averaged.dtype)
