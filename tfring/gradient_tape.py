"""TF2 custom training loops: DistributedGradientTape.

    with tf.GradientTape() as tape:
        loss = ...
    tape = tfring.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)   # averaged over ranks
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    if first_step:
        tfring.broadcast_variables(model.variables + optimizer.variables, root_rank=0)

Works eagerly and inside tf.function.
"""

import tensorflow as tf

from tfring import _gradients, collectives, naming
from tfring.compression import Compression


class DistributedGradientTape:
    """Wraps a tf.GradientTape: gradient() returns gradients reduced over all ranks.

    Args: Horovod's (see tfring.DistributedOptimizer). `device_dense`/`device_sparse` are
    accepted for compatibility. backward_passes_per_step > 1 is not implemented yet for the
    tape and raises NotImplementedError.
    """

    def __init__(self, gradtape, device_dense="", device_sparse="",
                 compression=Compression.none, sparse_as_dense=False, op=collectives.Average,
                 gradient_predivide_factor=1.0, groups=None, backward_passes_per_step=1,
                 average_aggregated_gradients=False, persistent=False,
                 watch_accessed_variables=True):
        _gradients.check_options(op, gradient_predivide_factor, backward_passes_per_step)
        if backward_passes_per_step != 1:
            raise NotImplementedError(
                "tfring.DistributedGradientTape: backward_passes_per_step > 1 is not "
                "implemented yet; use 1.")
        self._tape = gradtape
        self._reduce_options = dict(op=op, compression=compression,
                                    sparse_as_dense=sparse_as_dense,
                                    gradient_predivide_factor=gradient_predivide_factor,
                                    groups=groups)
        self._prefix = naming.tensor_name("DistributedGradientTape", None)[0]

    def gradient(self, target, sources, output_gradients=None, **kwargs):
        """The wrapped tape's gradients, reduced over ranks; same structure as `sources`."""
        grads = self._tape.gradient(target, sources, output_gradients=output_gradients,
                                    **kwargs)
        flat_sources = tf.nest.flatten(sources)
        flat_grads = tf.nest.flatten(grads, expand_composites=False)
        reduced = _gradients.allreduce_gradients(flat_grads, flat_sources, prefix=self._prefix,
                                                 **self._reduce_options)
        return tf.nest.pack_sequence_as(grads, reduced)

    def __getattr__(self, name):
        # watch, stop_recording, reset, jacobian, ...: the wrapped tape's. (Only called for
        # names not found on self; _tape itself must not recurse when it is missing.)
        if name == "_tape":
            raise AttributeError(name)
        return getattr(self._tape, name)
