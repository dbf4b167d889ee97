"""Local gradient accumulation: `backward_passes_per_step=N` in every wrapper.

N backward passes are summed on each rank in variables of their own; every Nth pass is an
*update step*: the sums are reduced over ranks once (one allreduce per gradient instead of
N) and the optimizer applies them once. Its iteration count, learning-rate schedule and
slots therefore see applied steps only. With average_aggregated_gradients=True the sum is
divided by N, so the update equals one step on an N times larger batch.

Every rank counts the same passes, so every rank takes the update branch of the same
`tf.cond` at the same step and the collectives inside it pair up.

The sums hold this rank's own data, so they are local state: not saved in checkpoints (a
checkpoint written by rank 0 could only restore rank 0's partial sums, on every rank) and
not broadcast. A job resumed from a checkpoint taken in the middle of a window starts a new
window: the unfinished window's passes are dropped. Checkpoint at window boundaries (steps
per epoch a multiple of N) and a resumed job trains exactly as an uninterrupted one.

tf.IndexedSlices gradients are added into dense sums (a variable cannot hold a changing
set of rows); they are reduced dense on the update step.
"""

import tensorflow as tf

from tfring._training import tf1_state as _tf1_state


class GradientAccumulator:
    """Sums gradients locally and reduces them once every `passes` calls.

    Args:
        passes: backward passes per update step (N >= 2).
        average: divide the sum by N (average_aggregated_gradients).
        local_variables: TF1 graphs: put the sums in the LOCAL_VARIABLES collection, so
            that savers and the global-variable broadcast leave them alone and the
            session's local init op zeroes them.
    """

    def __init__(self, passes, average, local_variables=False):
        self.passes = int(passes)
        self.average = bool(average)
        self._local = local_variables
        self.sums = None
        self.counter = None

    # Horovod's LocalGradientAggregationHelper names, read by scripts through a tf_keras
    # optimizer's `_agg_helper` (its `counter` is the passes since the last update).
    @property
    def backward_passes_per_step(self):
        return self.passes

    @property
    def average_aggregated_gradients(self):
        return self.average

    @property
    def built(self):
        return self.sums is not None

    def build(self, variables):
        """Creates one sum per variable and the pass counter (once)."""
        if self.built:
            return
        with tf.init_scope():
            self.sums = [self._variable(tf.zeros(v.shape, _dtype(v)),
                                        f"tfring_gradient_sum_{i}")
                         for i, v in enumerate(variables)]
            self.counter = self._variable(tf.constant(0, tf.int64), "tfring_backward_passes")

    def _variable(self, initial_value, name):
        # Not owned by any optimizer or model, so nothing saves or broadcasts them.
        if self._local:
            return tf.compat.v1.Variable(
                initial_value, trainable=False, name=name, use_resource=True,
                collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])
        return tf.Variable(initial_value, trainable=False, name=name)

    def add(self, grads):
        """Adds one pass's gradients; returns a bool tensor: is this an update step?"""
        # TF1: the sums may be newer than the script's initializer (tfring/_training/tf1_state.py).
        ready = _tf1_state.initialize_if_needed(self.sums + [self.counter])
        with tf.control_dependencies([ready] if ready is not None else []):
            return self._add(grads)

    def _add(self, grads):
        updates = []
        for total, grad in zip(self.sums, grads):
            if grad is None:
                continue
            if isinstance(grad, tf.IndexedSlices):
                grad = tf.convert_to_tensor(grad)
            updates.append(_assign_add(total, tf.cast(grad, _dtype(total))))
        with tf.control_dependencies(updates):
            count = _assign_add(self.counter, tf.constant(1, _dtype(self.counter)))
        return tf.greater_equal(count, self.passes)

    def totals(self, like):
        """The accumulated gradients (None where `like` has None), divided by N if averaging."""
        out = []
        for total, grad in zip(self.sums, like):
            if grad is None:
                out.append(None)
                continue
            value = tf.convert_to_tensor(total)
            out.append(value / self.passes if self.average else value)
        return out

    def reset_after(self, tensors):
        """An op that zeroes the sums and the counter once `tensors` were computed."""
        deps = [t for t in tf.nest.flatten(tensors) if t is not None]
        with tf.control_dependencies(deps):
            ops = [_assign(total, tf.zeros(total.shape, _dtype(total)))
                   for total in self.sums]
            ops.append(_assign(self.counter, tf.zeros([], _dtype(self.counter))))
        return tf.group(*ops)


def reduce_on_update_step(accumulator, grads, variables, reduce_fn):
    """The tape's, the TF1 optimizer's and LocalGradientAggregationHelper's path:
    (is_update, gradients).

    On an update step the gradients are the sums reduced by `reduce_fn(sums, variables)`;
    on the other steps they are zeros (the caller must skip applying them: see
    `apply_on_update_step`).
    """
    is_update = accumulator.add(grads)

    def reduced():
        totals = accumulator.totals(grads)
        out = reduce_fn(totals, variables)
        reset = accumulator.reset_after(out)
        with tf.control_dependencies([reset]):
            return [None if g is None else tf.identity(g) for g in out]

    def zeros():
        return [None if g is None else tf.zeros(v.shape, _dtype(v))
                for g, v in zip(grads, accumulator.sums)]

    present = [i for i, g in enumerate(grads) if g is not None]
    if not present:
        return is_update, list(grads)
    # tf.cond's branches must return the same structure: only the present gradients.
    picked = tf.cond(is_update, lambda: _pick(reduced(), present),
                     lambda: _pick(zeros(), present))
    out = [None] * len(grads)
    for i, g in zip(present, tf.nest.flatten(picked)):
        out[i] = g
    return is_update, out


def apply_on_update_step(is_update, apply_fn, skip_fn=None):
    """Runs `apply_fn()` (the optimizer's apply) only on update steps, and `skip_fn()` (if
    given) on the others; returns the op."""
    def run(fn):
        # TF1 graphs do not run what nothing depends on: make the branch wait for the fn.
        with tf.control_dependencies(graph_ops(fn())):
            return tf.no_op()
    return tf.cond(is_update, lambda: run(apply_fn),
                   (lambda: run(skip_fn)) if skip_fn else tf.no_op)


def graph_ops(result):
    """The ops and tensors in `result` (an apply's return value: an op, a tensor, a variable,
    None or a structure of them), for control dependencies."""
    return [r for r in tf.nest.flatten(result) if isinstance(r, (tf.Operation, tf.Tensor))]


def _pick(values, indices):
    return [values[i] for i in indices]


def _dtype(variable):
    dtype = variable.dtype
    return tf.as_dtype(dtype) if not isinstance(dtype, tf.DType) else dtype


def _assign_add(variable, value):
    return variable.assign_add(value)


def _assign(variable, value):
    return variable.assign(value)
