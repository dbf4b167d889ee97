"""State that tfring's TF1 wrappers create while the training op is built.

A TF1 script may build its initializer before the training op:

    opt = tfring.DistributedOptimizer(opt, op=tfring.Adasum)
    init = tf.compat.v1.global_variables_initializer()
    ...
    train_op = opt.minimize(loss)      # in the session, after init.run()

Horovod's own TF1 synthetic benchmark does this. Variables the wrapper makes inside
`minimize` (Adasum's step counter and start values, the sums of backward_passes_per_step)
are then in no initializer the script runs, and the first step would fail with "Could not
find variable". Their shapes are known only there, so they cannot all be made in the
constructor; instead the training op initializes each of them itself, on the first run
that finds it uninitialized. A variable an initializer or a checkpoint restore already set
is left alone.
"""

import tensorflow as tf


def in_tf1_graph():
    """Whether variables made now belong to a TF1 graph (not eager, not a tf.function's
    trace, whose variables are made eagerly and initialized at once)."""
    with tf.init_scope():
        return not tf.executing_eagerly()


def initialize_if_needed(variables, initial_values=None):
    """An op that sets each of `variables` to its initial value if it is still
    uninitialized, or None where nothing needs it (eager variables are initialized when
    made). The initial values are zeros, or `initial_values[i]()` for variable i: made
    inside the branch that assigns them, so they cost nothing on later steps."""
    if not variables or not in_tf1_graph():
        return None
    ops = []
    for i, v in enumerate(variables):
        def assign_initial(v=v, make=initial_values[i] if initial_values else None):
            value = make() if make else tf.zeros(v.shape, v.dtype.base_dtype)
            return tf.group(v.assign(value))
        ops.append(tf.cond(tf.compat.v1.is_variable_initialized(v), tf.no_op, assign_initial))
    return tf.group(*ops)
