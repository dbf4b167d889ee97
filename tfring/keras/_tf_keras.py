"""tf_keras (Keras 2, TF_USE_LEGACY_KERAS=1): distribute an optimizer by hooking it in place.

tf_keras optimizers aggregate gradients across replicas in one overridable method, which
`apply_gradients` calls before it applies them: `aggregate_gradients` on the optimizers of
tf_keras.optimizers, its private predecessor on tf_keras.optimizers.legacy
(tfring/_adapters/tf_keras.py). tfring replaces that method on the optimizer object with an
allreduce over ranks. Its LossScaleOptimizer
aggregates through the inner optimizer's method before it tests for inf/nan, so every rank
tests the same gradients. The object stays what it was (an Adam stays an Adam), so saving
and loading need nothing of tfring; tfring.keras.load_model hooks the loaded optimizer.

backward_passes_per_step > 1 also replaces `apply_gradients` on the object: gradients are
summed locally, and every Nth call they are reduced and the original apply_gradients applies
them. As Horovod on tf_keras, every pass counts in `optimizer.iterations` (the passes that
apply nothing add 1 themselves), so learning-rate schedules and Adam's bias correction see
passes, and `optimizer._agg_helper.counter` is the number of passes since the last update.
"""

import os
import sys

import tensorflow as tf

from tfring._training import accumulation as _accumulation
from tfring._training import gradients as _gradients
from tfring._adapters import tf_keras as tf_keras_hooks
from tfring.keras import _xla

_MARK = "_tfring_distributed"


def legacy_keras_active():
    """True when tf.keras is tf_keras (Keras 2), i.e. TF_USE_LEGACY_KERAS is set."""
    return os.environ.get("TF_USE_LEGACY_KERAS", "").lower() in ("1", "true", "yes")


def is_tf_keras_optimizer(optimizer):
    if "tf_keras" not in sys.modules:
        return False
    import tf_keras
    return isinstance(optimizer, (tf_keras.optimizers.Optimizer,
                                  tf_keras.optimizers.legacy.Optimizer))


def all_variables(optimizer):
    """An optimizer's variables in the order it made them. Keras 3: a list property;
    tf_keras: a CallableList property; tf_keras's legacy optimizers: a method."""
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)


def is_distributed(optimizer):
    return bool(getattr(optimizer, _MARK, False))


def check_not_distributed(optimizer):
    if is_distributed(optimizer):
        raise ValueError("This tf_keras optimizer is already distributed by tfring; wrap it "
                         "once.")


def mark_distributed(optimizer):
    setattr(optimizer, _MARK, True)


def _innermost(optimizer):
    # A LossScaleOptimizer aggregates through its inner optimizer's method.
    inner = getattr(optimizer, "inner_optimizer", None)
    return _innermost(inner) if inner is not None else optimizer


def distribute(optimizer, compression, sparse_as_dense, backward_passes_per_step, op,
               gradient_predivide_factor, average_aggregated_gradients, groups, process_set,
               scale_local_gradients):
    """Hooks `optimizer` (in place) to reduce its gradients over ranks; returns it. It also
    gets Horovod's `register_local_var(var)`."""
    _gradients.check_options(op, gradient_predivide_factor, backward_passes_per_step,
                             average_aggregated_gradients)
    check_not_distributed(optimizer)
    local_vars = _gradients.LocalVariables()
    options = dict(op=op, compression=compression, sparse_as_dense=sparse_as_dense,
                   gradient_predivide_factor=gradient_predivide_factor, groups=groups,
                   process_set=process_set, local_variables=local_vars,
                   scale_local_gradients=scale_local_gradients)
    optimizer.register_local_var = local_vars.add
    target = _innermost(optimizer)

    reduced_already = []  # gradients _compute_gradients returned reduced (held: ids stay)

    def aggregate(grads_and_vars):
        _xla.check_not_in_xla("tfring.keras.DistributedOptimizer (tf_keras)")
        grads_and_vars = list(grads_and_vars)
        if not grads_and_vars:
            return grads_and_vars
        grads, variables = zip(*grads_and_vars)
        if reduced_already and all(any(g is r for r in reduced_already)
                                   for g in grads if g is not None):
            reduced_already.clear()  # from _compute_gradients: reduced once is enough
            return grads_and_vars
        reduced = _gradients.allreduce_gradients(
            grads, variables, kind="keras.DistributedOptimizer", **options)
        return list(zip(reduced, variables))

    local_compute = None  # the optimizer's own (tf_keras_hooks.hook_gradients below)

    def compute_gradients(loss, var_list, grad_loss=None, tape=None):
        # Horovod's hook: the (gradient, variable) pairs with gradients reduced over ranks;
        # apply_gradients on them then does not reduce them again.
        if local_compute is not None:
            pairs = local_compute(loss, var_list, grad_loss=grad_loss, tape=tape)
        else:
            pairs = target.compute_gradients(loss, var_list, tape=tape)
        if accumulating:
            return pairs  # the accumulating apply_gradients reduces the sums on update steps
        reduced = aggregate(pairs)
        reduced_already[:] = [g for g, _ in reduced if g is not None]
        return reduced

    accumulating = int(backward_passes_per_step) > 1
    local_compute = tf_keras_hooks.hook_gradients(target, aggregate, compute_gradients)
    if accumulating:
        hook_accumulation(optimizer, int(backward_passes_per_step),
                          average_aggregated_gradients, aggregate, reduced_already)
    mark_distributed(optimizer)
    return optimizer


def hook_accumulation(optimizer, passes, average, aggregate, reduced_already,
                      build_slots=None):
    """Replaces optimizer.apply_gradients: sums passes locally; on every `passes`-th call
    reduces the sums with `aggregate` and applies them. The reduction happens here, not in
    the original apply_gradients, which skips its aggregation when a script passes
    experimental_aggregate_gradients=False (Horovod's pattern after _compute_gradients);
    `reduced_already` tells the hooked aggregation not to reduce them again.
    build_slots(optimizer, variables) builds the optimizer's variables before the first
    pass (default: _build_slots)."""
    original_apply = optimizer.apply_gradients
    build_slots = build_slots or _build_slots
    accumulator = _accumulation.GradientAccumulator(passes, average)
    optimizer._agg_helper = accumulator  # Horovod's name: scripts read its `counter`

    def apply_gradients(grads_and_vars, *args, **kwargs):
        grads_and_vars = [(g, v) for g, v in grads_and_vars]
        grads = [g for g, _ in grads_and_vars]
        variables = [v for _, v in grads_and_vars]
        build_slots(optimizer, variables)  # variables cannot be created inside the tf.cond
        accumulator.build(variables)  # once; local state, see tfring/_training/accumulation.py
        is_update = accumulator.add(grads)

        def update():
            totals = accumulator.totals(grads)
            reduced = aggregate(list(zip(totals, variables)))
            reduced_already[:] = [g for g, _ in reduced if g is not None]
            applied = original_apply(reduced, *args, **kwargs)
            reduced_already.clear()  # also where the original apply did not aggregate
            # The sums are zeroed after the apply: in a TF1 graph nothing else orders them.
            with tf.control_dependencies(_accumulation.graph_ops(applied)):
                return accumulator.reset_after(totals)

        def count_the_pass():
            # Horovod's count: a pass that applies nothing still adds 1 to `iterations`
            # (through the property, which a LossScaleOptimizer forwards to its inner one).
            return optimizer.iterations.assign_add(1, read_value=False)

        # Each branch's op waits for its work: a TF1 graph runs only what the result needs.
        return _accumulation.apply_on_update_step(is_update, update, count_the_pass)

    optimizer.apply_gradients = apply_gradients


def _build_slots(optimizer, variables):
    inner = _innermost(optimizer)
    with tf.init_scope():
        if hasattr(inner, "aggregate_gradients"):  # tf_keras.optimizers.Optimizer
            inner.build(variables)
        elif tf_keras_hooks.is_legacy(inner):
            tf_keras_hooks.legacy_build(inner)(variables)
