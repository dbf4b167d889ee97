"""Adasum for TF1 optimizers: combine what each rank's optimizer did, not its gradients.

`tfring.DistributedOptimizer(opt, op=tfring.Adasum)` works as Horovod designed its Adasum
optimizer: every rank applies its own gradients with the wrapped optimizer (so Adam's or
momentum's state stays local), and every `backward_passes_per_step`-th step the change of
each variable since the last combination (its delta) is reduced with Adasum over the ranks;
every rank then sets the variable to start + combined delta. Between combinations the ranks'
variables differ; after one they agree.

State: a step counter and, per variable, its value at the last combination ("start"),
taken from the variable on the first step. They are global variables, so a TF1 Saver (and
MonitoredTrainingSession's checkpoints) saves them; a rank outside the optimizer's process
set applies its own gradients alone, as in the other wrappers.
"""

import tensorflow as tf

from tfring import collectives
from tfring._training import gradients as _gradients
from tfring._training import tf1_state as _tf1_state


class AdasumDelta:
    """Builds the update of one DistributedOptimizer with op=Adasum (see the module doc)."""

    def __init__(self, period, compression, process_set, local_variables):
        self._period = int(period)
        self._compression = compression
        self._process_set = process_set
        self._local = local_variables
        self._state = {}  # graph (None: eager) -> (step, {variable ref: start})

    def _state_for(self, variables):
        with tf.init_scope():  # the variables outlive a tf.function's trace
            key = None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()
            step, starts = self._state.get(key) or (None, {})
            if step is None:
                step = tf.Variable(tf.constant(0, tf.int64), trainable=False,
                                   name="adasum_step")
            for v in variables:
                if v.ref() not in starts:
                    starts[v.ref()] = tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False,
                                              name="adasum_start")
            self._state[key] = (step, starts)
        return step, [starts[v.ref()] for v in variables]

    def apply(self, grads_and_vars, apply_fn):
        """Runs apply_fn() (the wrapped optimizer's apply_gradients), then, on every
        period-th step, the Adasum of the variables' deltas. Returns the training op."""
        if not self._process_set.included() or self._process_set.size() == 1:
            return apply_fn()  # as the other wrappers: outside the set, train alone
        variables = [v for g, v in grads_and_vars if g is not None and v not in self._local]
        step, starts = self._state_for(variables)
        # TF1: the state may be newer than the script's initializer (tfring/_training/tf1_state.py):
        # the step starts at 0, a start at its variable's value.
        ready = _tf1_state.initialize_if_needed(
            [step] + starts,
            [None] + [lambda v=v: tf.convert_to_tensor(v) for v in variables])
        with tf.control_dependencies([ready] if ready is not None else []):
            first = tf.equal(step, 0)
        remember = tf.cond(
            first, lambda: tf.group([s.assign(v) for s, v in zip(starts, variables)]), tf.no_op)
        with tf.control_dependencies([remember]):
            update = apply_fn()
        with tf.control_dependencies([update] if update is not None else []):
            def combine():
                deltas = [tf.convert_to_tensor(v) - s for v, s in zip(variables, starts)]
                combined = collectives.grouped_allreduce(
                    deltas, op=collectives.Adasum, compression=self._compression,
                    name=_gradients.gradient_names("AdasumDelta", variables)[0],
                    process_set=self._process_set)
                new_starts = [s.assign_add(d) for s, d in zip(starts, combined)]
                return tf.group([v.assign(n) for v, n in zip(variables, new_starts)])

            communicate = tf.equal(step % self._period, self._period - 1)
            done = tf.cond(communicate, combine, tf.no_op) if variables else None
        with tf.control_dependencies([done] if done is not None else []):
            return tf.group(step.assign_add(1))
