"""TF1 graph training: DistributedOptimizer around a tf.compat.v1.train.Optimizer, and the
broadcast of initial variables for MonitoredTrainingSession scripts.

    opt = tfring.DistributedOptimizer(tf.compat.v1.train.AdagradOptimizer(0.01 * tfring.size()))
    train_op = opt.minimize(loss, global_step=global_step)
    hooks = [tfring.BroadcastGlobalVariablesHook(0), ...]
    with tf.compat.v1.train.MonitoredTrainingSession(hooks=hooks, ...) as sess: ...

TF 2.16+ has no tf.train.SessionRunHook and no tf.estimator (which is why Horovod's hook is
gone there); the hook here is a tf.compat.v1.train.SessionRunHook.
"""

import tensorflow as tf

from tfring import _gradients, collectives, naming
from tfring.compression import Compression


class DistributedOptimizer(tf.compat.v1.train.Optimizer):
    """Wraps a TF1 optimizer: compute_gradients returns gradients averaged over all ranks;
    apply_gradients and minimize work as with the wrapped optimizer.

    Args: Horovod's. `device_dense`/`device_sparse` are accepted for compatibility (tfring
    places collectives with their inputs). backward_passes_per_step > 1 is not implemented
    yet for TF1 graphs and raises NotImplementedError.
    """

    def __init__(self, optimizer, name=None, use_locking=False, device_dense="",
                 device_sparse="", compression=Compression.none, sparse_as_dense=False,
                 backward_passes_per_step=1, op=collectives.Average,
                 gradient_predivide_factor=1.0, average_aggregated_gradients=False,
                 groups=None):
        _gradients.check_options(op, gradient_predivide_factor, backward_passes_per_step)
        if backward_passes_per_step != 1:
            raise NotImplementedError(
                "tfring.DistributedOptimizer (TF1): backward_passes_per_step > 1 is not "
                "implemented yet; use 1, or tfring.keras.DistributedOptimizer.")
        self._optimizer = optimizer
        self._reduce_options = dict(op=op, compression=compression,
                                    sparse_as_dense=sparse_as_dense,
                                    gradient_predivide_factor=gradient_predivide_factor,
                                    groups=groups)
        name = name or f"Distributed{type(optimizer).__name__}"
        self._prefix = naming.tensor_name("DistributedOptimizer", None)[0]
        super().__init__(name=name, use_locking=use_locking)

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's (gradient, variable) pairs, gradients reduced over ranks."""
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        if not pairs:
            return pairs
        grads, variables = zip(*pairs)
        reduced = _gradients.allreduce_gradients(grads, variables, prefix=self._prefix,
                                                 **self._reduce_options)
        return list(zip(reduced, variables))

    def apply_gradients(self, *args, **kwargs):
        return self._optimizer.apply_gradients(*args, **kwargs)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


def broadcast_global_variables(root_rank):
    """An op that assigns root_rank's values to every global variable (TF1 graphs)."""
    if tf.executing_eagerly():
        raise RuntimeError("tfring.broadcast_global_variables is for TF1 graphs; in eager mode "
                           "use tfring.broadcast_variables(model.variables, root_rank).")
    return collectives.broadcast_variables(tf.compat.v1.global_variables(), root_rank,
                                           name="broadcast_global_variables")


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
