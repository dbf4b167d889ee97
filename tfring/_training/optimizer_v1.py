"""TF1 graph training: DistributedOptimizer around a tf.compat.v1.train.Optimizer, and the
broadcast of initial variables for MonitoredTrainingSession scripts.

    opt = tfring.DistributedOptimizer(tf.compat.v1.train.AdagradOptimizer(0.01 * tfring.size()))
    train_op = opt.minimize(loss, global_step=global_step)
    hooks = [tfring.BroadcastGlobalVariablesHook(0), ...]
    with tf.compat.v1.train.MonitoredTrainingSession(hooks=hooks, ...) as sess: ...

TF 2.16+ has no tf.train.SessionRunHook and no tf.estimator (which is why Horovod's hook is
gone there); the hook here is a tf.compat.v1.train.SessionRunHook.
"""

import functools
import inspect

import tensorflow as tf

from tfring import collectives
from tfring._training import accumulation as _accumulation
from tfring._training import adasum_delta as _adasum_delta
from tfring._training import gradients as _gradients
from tfring._adapters import tf_internals
from tfring.compression import Compression
from tfring.functions import broadcast_global_variables  # noqa: F401  (exported here too)
from tfring._ops.process_sets import global_process_set


class DistributedOptimizer(tf.compat.v1.train.Optimizer):
    """Wraps a TF1 optimizer: compute_gradients returns gradients averaged over all ranks;
    apply_gradients and minimize work as with the wrapped optimizer. Given a Keras
    optimizer, returns tfring.keras.DistributedOptimizer's wrapper instead, as Horovod.

    Args: Horovod's. `device_dense`/`device_sparse` are accepted for compatibility (tfring
    places collectives with their inputs); `num_groups` is Horovod's older name for an int
    `groups`; `process_set` reduces over its ranks only; variables given to
    register_local_var keep their local gradients (divided by the set's size when
    scale_local_gradients is on, as Horovod). With backward_passes_per_step=N > 1, each
    session run adds its gradients to local sums; every Nth run compute_gradients returns
    the sums reduced over ranks (zeros on the other runs) and apply_gradients applies
    them, so the wrapped optimizer and `global_step` advance once per N runs (count
    StopAtStepHook's last_step in applied steps). The sums are local variables (not
    checkpointed, not broadcast; see tfring/_training/accumulation.py).

    With op=tfring.Adasum, as Horovod's Adasum optimizer: each rank applies its own
    gradients, and every backward_passes_per_step-th step the variables' changes are
    combined with Adasum (tfring/_training/adasum_delta.py).
    """

    def __new__(cls, optimizer, *args, **kwargs):
        # As Horovod's hvd.DistributedOptimizer: a Keras optimizer gets the Keras wrapper
        # (scripts written against horovod.tensorflow wrap Keras optimizers with it too).
        if isinstance(optimizer, tf.compat.v1.train.Optimizer):
            return super().__new__(cls)
        from tfring.keras import optimizer as keras_optimizer
        if keras_optimizer.is_keras_optimizer(optimizer):
            options = inspect.signature(cls.__init__).bind(None, optimizer, *args,
                                                            **kwargs).arguments
            del options["self"]
            options.pop("use_locking", None)
            return keras_optimizer.DistributedOptimizer(**options)
        raise ValueError("tfring.DistributedOptimizer needs a TF1 optimizer "
                         "(tf.compat.v1.train.Optimizer) or a Keras optimizer. Received: "
                         f"{type(optimizer)!r}")

    def __init__(self, optimizer, name=None, use_locking=False, device_dense="",
                 device_sparse="", compression=Compression.none, sparse_as_dense=False,
                 backward_passes_per_step=1, op=collectives.Average,
                 gradient_predivide_factor=1.0, average_aggregated_gradients=False,
                 num_groups=0, groups=None, process_set=global_process_set,
                 scale_local_gradients=True):
        _gradients.check_options(op, gradient_predivide_factor, backward_passes_per_step,
                                 average_aggregated_gradients)
        self._optimizer = optimizer
        self._passes = int(backward_passes_per_step)
        self._average_passes = average_aggregated_gradients
        self._accumulators = {}  # graph -> GradientAccumulator
        self._update_steps = {}  # graph -> the bool tensor of the last compute_gradients
        self._local_vars = _gradients.LocalVariables()
        self._reduce_options = dict(op=op, compression=compression,
                                    sparse_as_dense=sparse_as_dense,
                                    gradient_predivide_factor=gradient_predivide_factor,
                                    groups=_gradients.resolve_groups(num_groups, groups),
                                    process_set=process_set, local_variables=self._local_vars,
                                    scale_local_gradients=scale_local_gradients)
        self._adasum = None
        if op == collectives.Adasum:
            self._adasum = _adasum_delta.AdasumDelta(self._passes, compression, process_set,
                                                     self._local_vars)
        name = name or f"Distributed{type(optimizer).__name__}"
        super().__init__(name=name, use_locking=use_locking)

    def register_local_var(self, var):
        """Horovod's: `var`'s gradient stays this rank's own (not reduced over ranks)."""
        self._local_vars.add(var)

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's (gradient, variable) pairs, gradients reduced over ranks."""
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        if not pairs or self._adasum is not None:  # Adasum combines updates, not gradients
            return pairs
        grads, variables = zip(*pairs)
        if self._passes == 1:
            reduced = _gradients.allreduce_gradients(
                grads, variables, kind="DistributedOptimizer", **self._reduce_options)
            return list(zip(reduced, variables))
        graph = tf.compat.v1.get_default_graph()
        accumulator = self._accumulators.get(graph)
        if accumulator is None:
            accumulator = _accumulation.GradientAccumulator(
                self._passes, self._average_passes, local_variables=True)
            accumulator.build(variables)
            self._accumulators[graph] = accumulator
        is_update, reduced = _accumulation.reduce_on_update_step(
            accumulator, grads, variables, functools.partial(
                _gradients.allreduce_gradients, kind="DistributedOptimizer",
                **self._reduce_options))
        self._update_steps[graph] = is_update
        return list(zip(reduced, variables))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """The wrapped optimizer's apply_gradients; with backward_passes_per_step > 1, only
        on the update steps that compute_gradients marked."""
        if self._adasum is not None:
            grads_and_vars = list(grads_and_vars)
            return self._adasum.apply(grads_and_vars, lambda: self._optimizer.apply_gradients(
                grads_and_vars, global_step, name))
        if self._passes == 1:
            return self._optimizer.apply_gradients(grads_and_vars, global_step, name)
        is_update = self._update_steps.get(tf.compat.v1.get_default_graph())
        if is_update is None:
            raise ValueError("tfring.DistributedOptimizer with backward_passes_per_step > 1: "
                             "call compute_gradients (or minimize) of this optimizer before "
                             "apply_gradients, so it knows which runs are update steps.")
        grads_and_vars = list(grads_and_vars)
        with tf.init_scope():  # slots are variables: create them outside the tf.cond
            tf_internals.create_tf1_slots(self._optimizer,
                                          [v for g, v in grads_and_vars if g is not None])
        return _accumulation.apply_on_update_step(
            is_update, lambda: self._optimizer.apply_gradients(grads_and_vars, global_step, name))

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """Broadcasts root_rank's global variables to every rank once the session is created,
    so all ranks start from the same weights (random initialization or a checkpoint that
    only root_rank restored).

    Args:
        root_rank: the rank whose values everyone takes.
        device: accepted for Horovod compatibility; unused.
    """

    def __init__(self, root_rank, device=""):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self._op = None

    def begin(self):
        if self._op is None or self._op.graph is not tf.compat.v1.get_default_graph():
            self._op = broadcast_global_variables(self.root_rank)

    def after_create_session(self, session, coord):
        session.run(self._op)
