"""Horovod's LocalGradientAggregationHelper: `backward_passes_per_step` for code that brings
its own reduction function.

tfring's wrappers accumulate through tfring/_training/accumulation.py directly; this class gives the
same machinery Horovod's constructor and methods, for scripts and libraries that build their
own optimizer wrapper on Horovod's helper:

    helper = LocalGradientAggregationHelper(
        backward_passes_per_step=4, allreduce_func=my_allreduce, sparse_as_dense=False,
        average_aggregated_gradients=True, rank=tfring.rank(),
        optimizer_type=LocalGradientAggregationHelper._OPTIMIZER_TYPE_LEGACY)
    grads = helper.compute_gradients(grads, variables)          # zeros between updates
    train_op = helper.apply_gradients(lambda: opt.apply_gradients(zip(grads, variables)), opt)

`allreduce_func(grads, variables)` returns the reduced gradients. The optimizer runs on
update steps only. A tf_keras optimizer's `iterations` counts every pass, as Horovod's helper
counts it (the passes that apply nothing add 1); a Keras 3 optimizer's counts applied steps,
Keras 3's own convention for its gradient_accumulation_steps.
"""

import tensorflow as tf

from tfring._training import accumulation as _accumulation
from tfring._training import gradients as _gradients
from tfring._ops.process_sets import global_process_set


class LocalGradientAggregationHelper:
    """Sums `backward_passes_per_step` passes of gradients locally, then reduces them once
    with `allreduce_func` and lets the optimizer apply them (see the module doc).

    Args: Horovod's. `rank` is accepted for compatibility (unused); `optimizer_type` says
    where the sums live: TF1 graphs (_OPTIMIZER_TYPE_LEGACY) keep them in the
    LOCAL_VARIABLES collection; `process_set` and `scale_local_gradients` apply to
    variables given to register_local_var, whose sums are not reduced.
    """

    _OPTIMIZER_TYPE_KERAS = "optimizer_type_keras"
    _OPTIMIZER_TYPE_LEGACY = "optimizer_type_legacy"

    def __init__(self, backward_passes_per_step, allreduce_func, sparse_as_dense,
                 average_aggregated_gradients, rank, optimizer_type,
                 process_set=global_process_set, scale_local_gradients=True, name=None):
        if int(backward_passes_per_step) < 1:
            raise ValueError("backward_passes_per_step must be >= 1. "
                             f"Received: {backward_passes_per_step}")
        if optimizer_type not in (self._OPTIMIZER_TYPE_KERAS, self._OPTIMIZER_TYPE_LEGACY):
            raise ValueError(f"optimizer_type must be LocalGradientAggregationHelper."
                             f"_OPTIMIZER_TYPE_KERAS or _OPTIMIZER_TYPE_LEGACY. Received: "
                             f"{optimizer_type!r}")
        self.backward_passes_per_step = int(backward_passes_per_step)
        self.average_aggregated_gradients = bool(average_aggregated_gradients)
        self._allreduce_func = allreduce_func
        self._sparse_as_dense = sparse_as_dense
        self._accumulator = _accumulation.GradientAccumulator(
            self.backward_passes_per_step, self.average_aggregated_gradients,
            local_variables=optimizer_type == self._OPTIMIZER_TYPE_LEGACY and
            not tf.executing_eagerly())
        self._local_vars = _gradients.LocalVariables()
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        self.name = name
        self._is_update = None

    def register_local_var(self, var):
        """`var`'s accumulated gradient stays this rank's own (not passed to allreduce_func)."""
        self._local_vars.add(var)

    def _reduce(self, totals, variables):
        shared = [i for i, v in enumerate(variables) if v not in self._local_vars]
        out = [_gradients.scaled_local(g, self.process_set.size())
               if self.scale_local_gradients else g for g in totals]
        reduced = self._allreduce_func([totals[i] for i in shared],
                                       [variables[i] for i in shared])
        for i, g in zip(shared, reduced):
            out[i] = g
        return out

    def compute_gradients(self, grads, vars):  # noqa: A002 (Horovod's argument name)
        """Adds this pass's gradients to the sums; returns the reduced sums on every
        backward_passes_per_step-th call and zeros on the others."""
        grads, variables = list(grads), list(vars)
        if self._sparse_as_dense:
            grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
                     for g in grads]
        self._accumulator.build(variables)
        self._is_update, out = _accumulation.reduce_on_update_step(
            self._accumulator, grads, variables, self._reduce)
        return out

    def apply_gradients(self, apply_grads_closure, optimizer, *args, **kwargs):
        """Runs `apply_grads_closure()` on update steps only; returns the op (None eagerly).
        `optimizer` and the further arguments are accepted as Horovod's helper takes them."""
        if self._is_update is None:
            raise ValueError("LocalGradientAggregationHelper.apply_gradients: call "
                             "compute_gradients first (it decides which steps apply).")
        skip = None
        if type(optimizer).__module__.startswith("tf_keras") and \
                getattr(optimizer, "iterations", None) is not None:
            skip = lambda: optimizer.iterations.assign_add(1)  # noqa: E731
        return _accumulation.apply_on_update_step(self._is_update, apply_grads_closure, skip)
