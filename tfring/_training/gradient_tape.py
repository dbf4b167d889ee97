"""TF2 custom training loops: DistributedGradientTape.

    with tf.GradientTape() as tape:
        loss = ...
    tape = tfring.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)   # averaged over ranks
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    if first_step:
        tfring.broadcast_variables(model.variables + optimizer.variables, root_rank=0)

Works eagerly and inside tf.function.

With backward_passes_per_step=N > 1 the tape sums N passes locally and reduces once; apply
through the tape, so that the optimizer runs on update steps only:

    grads = tape.gradient(loss, variables)      # reduced sums every Nth call, else zeros
    tape.apply_gradients(optimizer, zip(grads, variables))
"""

import functools
import weakref

import tensorflow as tf

from tfring import collectives
from tfring._training import accumulation
from tfring._training import gradients as _gradients
from tfring.compression import Compression
from tfring._ops.process_sets import global_process_set

# Tapes are made anew each step, but the sums of backward_passes_per_step > 1 must outlive
# them: they are kept per list of variables (and options), for as long as the variables
# live (tf.Variable cannot be a dict key; its id can, while the variable lives).
_ACCUMULATORS = {}


def _accumulator_for(sources, passes, average):
    key = (tuple(id(v) for v in sources), passes, average)
    accumulator = _ACCUMULATORS.get(key)
    if accumulator is None:
        accumulator = accumulation.GradientAccumulator(passes, average)
        accumulator.build(sources)
        _ACCUMULATORS[key] = accumulator
        # Forgotten when any of its variables goes: the table holds only live sums, and a
        # later variable that reuses an id never finds a stale one.
        for v in sources:
            weakref.finalize(v, _ACCUMULATORS.pop, key, None)
    return accumulator


class DistributedGradientTape:
    """Wraps a tf.GradientTape: gradient() returns gradients reduced over all ranks.

    Args: Horovod's (see tfring.DistributedOptimizer). `device_dense`/`device_sparse` are
    accepted for compatibility; `num_groups` is Horovod's older name for an int `groups`;
    `process_set`: reduce over its ranks only; `scale_local_gradients`: divide the
    gradients of sources registered with register_local_source (not reduced) by the set's
    size, as Horovod does. backward_passes_per_step=N > 1: gradient() adds to local
    sums kept across tapes (per list of sources) and returns them reduced over ranks every
    Nth call, zeros on the others; `apply_gradients(optimizer, ...)` applies on those
    update steps only. average_aggregated_gradients=True divides the sums by N.
    """

    def __init__(self, gradtape, device_dense="", device_sparse="",
                 compression=Compression.none, sparse_as_dense=False, op=collectives.Average,
                 gradient_predivide_factor=1.0, num_groups=0, groups=None,
                 process_set=global_process_set, scale_local_gradients=True,
                 backward_passes_per_step=1, average_aggregated_gradients=False,
                 persistent=False, watch_accessed_variables=True):
        _gradients.check_options(op, gradient_predivide_factor, backward_passes_per_step,
                                 average_aggregated_gradients)
        self._tape = gradtape
        self._passes = int(backward_passes_per_step)
        self._average_passes = average_aggregated_gradients
        self._is_update = None
        self._local_sources = _gradients.LocalVariables()
        self.process_set = process_set
        self._reduce_options = dict(op=op, compression=compression,
                                    sparse_as_dense=sparse_as_dense,
                                    gradient_predivide_factor=gradient_predivide_factor,
                                    groups=_gradients.resolve_groups(num_groups, groups),
                                    process_set=process_set,
                                    local_variables=self._local_sources,
                                    scale_local_gradients=scale_local_gradients)

    def register_local_source(self, source):
        """Horovod's: `source`'s gradient stays this rank's own (not reduced over ranks)."""
        self._local_sources.add(source)

    def gradient(self, target, sources, output_gradients=None, use_generic_names=False,
                 **kwargs):
        """The wrapped tape's gradients, reduced over ranks; same structure as `sources`.
        `use_generic_names` is Horovod's, accepted for its scripts: tfring names the
        reductions after the gradients' positions either way."""
        del use_generic_names
        grads = self._tape.gradient(target, sources, output_gradients=output_gradients,
                                    **kwargs)
        flat_sources = tf.nest.flatten(sources)
        flat_grads = tf.nest.flatten(grads, expand_composites=False)
        if self._passes == 1:
            reduced = _gradients.allreduce_gradients(flat_grads, flat_sources,
                                                     kind="DistributedGradientTape",
                                                     **self._reduce_options)
        else:
            accumulator = _accumulator_for(flat_sources, self._passes, self._average_passes)
            self._is_update, reduced = accumulation.reduce_on_update_step(
                accumulator, flat_grads, flat_sources, functools.partial(
                    _gradients.allreduce_gradients, kind="DistributedGradientTape",
                    **self._reduce_options))
        out = tf.nest.pack_sequence_as(grads, reduced)
        return list(out) if type(sources) is tuple else out  # Horovod returns a list

    def get_local_and_global_gradients(self, target, sources, output_gradients=None,
                                       use_generic_names=False):
        """Horovod's: gradient()'s results split in two lists of (source, gradient): the
        sources registered as local (register_local_source, a Partial tape's local layers),
        then the others, each in the order of `sources`."""
        grads = self.gradient(target, sources, output_gradients=output_gradients,
                              use_generic_names=use_generic_names)
        local, shared = [], []
        for source, grad in zip(tf.nest.flatten(sources), tf.nest.flatten(grads)):
            (local if source in self._local_sources else shared).append((source, grad))
        return local, shared

    def apply_gradients(self, optimizer, grads_and_vars):
        """`optimizer.apply_gradients(grads_and_vars)`, on update steps only.

        With backward_passes_per_step=1 every call is an update step. Call gradient() first.
        """
        grads_and_vars = list(grads_and_vars)
        if self._passes == 1:
            return optimizer.apply_gradients(grads_and_vars)
        if self._is_update is None:
            raise ValueError("DistributedGradientTape.apply_gradients: call gradient() on this "
                             "tape first; it decides whether this is an update step.")
        build = getattr(optimizer, "build", None)
        if callable(build) and not getattr(optimizer, "built", True):
            # Keras creates its slots on first apply; variables cannot be made in a tf.cond.
            build([v for _, v in grads_and_vars])
        return accumulation.apply_on_update_step(
            self._is_update, lambda: optimizer.apply_gradients(grads_and_vars))

    def __enter__(self):
        # `with tfring.DistributedGradientTape(tf.GradientTape()) as tape:` records on the
        # wrapped tape, as with Horovod's (a GradientTape subclass).
        self._tape.__enter__()
        return self

    def __exit__(self, *exc_info):
        return self._tape.__exit__(*exc_info)

    def __getattr__(self, name):
        # watch, stop_recording, reset, jacobian, ...: the wrapped tape's. (Only called for
        # names not found on self; _tape itself must not recurse when it is missing.)
        if name == "_tape":
            raise AttributeError(name)
        return getattr(self._tape, name)


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="",
                                   compression=Compression.none, sparse_as_dense=False,
                                   op=collectives.Average, gradient_predivide_factor=1.0,
                                   num_groups=0, groups=None, process_set=global_process_set,
                                   local_layers=None, scale_local_gradients=True):
    """A DistributedGradientTape that leaves the gradients of `local_layers` (Keras layers:
    one, or a list) unreduced, as Horovod's: each rank trains those layers on its own data.

    Their gradients are divided by the process set's size when scale_local_gradients is on.
    """
    layers = _local_layers(local_layers)
    tape = DistributedGradientTape(
        gradtape, device_dense, device_sparse, compression, sparse_as_dense, op,
        gradient_predivide_factor, num_groups, groups, process_set, scale_local_gradients)
    for layer in layers:
        for variable in layer.trainable_weights:
            tape.register_local_source(variable)
    return tape


def _local_layers(local_layers):
    """`local_layers` as a list of layers (anything with trainable_weights), checked."""
    if local_layers is None:
        return []
    layers = [local_layers] if hasattr(local_layers, "trainable_weights") else list(local_layers)
    for layer in layers:
        if not hasattr(layer, "trainable_weights"):
            raise ValueError(f"local_layers must be Keras layers; got {type(layer).__name__}")
    return layers
