"""tfring.keras.DistributedOptimizer: gradients averaged over ranks inside model.fit.

Keras 3 (the TensorFlow backend) has none of the hooks Horovod used (`get_gradients`,
`_aggregate_gradients`), so the wrapper is built by composition around `apply`, the way
Keras's own LossScaleOptimizer wraps an inner optimizer: `apply(grads)` reduces the
gradients over ranks, then calls the inner optimizer's `apply`. Its learning rate,
iterations and variables are the inner optimizer's, so callbacks, schedules and
checkpoints see the optimizer they know.

Mixed precision: Keras wraps any optimizer that is not a LossScaleOptimizer in one when the
policy is mixed_float16; that outer one would test the *local* gradients for inf/nan and
skip the step (and its allreduce) on some ranks only, and the others would wait forever.
So when the optimizer given is a LossScaleOptimizer, or the global policy is
mixed_float16, DistributedOptimizer returns a DistributedLossScaleOptimizer: a
LossScaleOptimizer that reduces first, so every rank tests the same gradients.

tf_keras (TF_USE_LEGACY_KERAS=1) optimizers are hooked in place instead (_tf_keras.py).
"""

import warnings

import keras
import tensorflow as tf

from tfring import collectives, functions
from tfring._training import accumulation as _accumulation
from tfring._training import gradients as _gradients
from tfring._adapters import keras3, tf_internals
from tfring.compression import Compression
from tfring._ops.process_sets import global_process_set
from tfring.keras import _sharded, _tf_keras, _tf_keras_sharded, _xla

_KIND = "keras.DistributedOptimizer"
_COMPRESSIONS = {"none": Compression.none, "fp16": Compression.fp16}


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=collectives.Average,
                         backward_passes_per_step=1, average_aggregated_gradients=False,
                         num_groups=0, groups=None, process_set=global_process_set,
                         scale_local_gradients=True, shard_optimizer_state=False):
    """Wraps a Keras optimizer so that `model.fit` averages gradients over all ranks.

    Args:
        optimizer: a Keras 3 optimizer (a LossScaleOptimizer too), or a tf_keras one.
        name: the wrapper's name (default "Distributed<inner name>").
        device_dense, device_sparse: accepted for Horovod compatibility; unused.
        compression: Compression.none or Compression.fp16 (floats travel as float16).
        sparse_as_dense: densify tf.IndexedSlices gradients instead of allgathering them.
        backward_passes_per_step: N > 1 sums N batches' gradients locally, reduces once
            and applies once; the inner optimizer's iterations count applied steps.
        op: tfring.Average (default), tfring.Sum or tfring.Adasum.
        gradient_predivide_factor: divide by this before the sum, by size/this after.
        average_aggregated_gradients: with N > 1, divide the sum by N (the update then
            equals one step on an N times larger batch).
        num_groups: Horovod's older name for an int `groups`.
        groups: an int (that many fused groups) or lists of variables reduced together.
        process_set: reduce over the ranks of this tfring.ProcessSet only.
        scale_local_gradients: divide the gradients of variables given to
            `register_local_var` (which are not reduced) by the set's size, as Horovod.
        shard_optimizer_state: tfring's own (not Horovod's): each rank keeps and updates
            the optimizer state of 1/N of the weights only (ZeRO stage 1); gradients are
            reduce-scattered and the updated weights allgathered. Keras 3 and tf_keras
            optimizers; docs/sharded-optimizer.md says what it supports.

    Returns:
        A DistributedKerasOptimizer (a DistributedLossScaleOptimizer for a
        LossScaleOptimizer or under the mixed_float16 policy) for Keras 3; for tf_keras,
        the same optimizer object, with its gradient aggregation hooked.

    Example:
        >>> opt = tfring.keras.DistributedOptimizer(keras.optimizers.Adam(1e-3 * hvd.size()))
        >>> model.compile(optimizer=opt, loss="mse")
    """
    options = dict(name=name, compression=compression, sparse_as_dense=sparse_as_dense,
                   backward_passes_per_step=backward_passes_per_step, op=op,
                   gradient_predivide_factor=gradient_predivide_factor,
                   average_aggregated_gradients=average_aggregated_gradients,
                   groups=_gradients.resolve_groups(num_groups, groups), process_set=process_set,
                   scale_local_gradients=scale_local_gradients,
                   shard_optimizer_state=shard_optimizer_state)
    if isinstance(optimizer, _DistributedMixin):
        raise ValueError(f"The optimizer '{optimizer.name}' is already a tfring "
                         "DistributedOptimizer; wrap the inner optimizer once.")
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return DistributedLossScaleOptimizer(
            optimizer.inner_optimizer, initial_scale=optimizer.initial_scale,
            dynamic_growth_steps=optimizer.dynamic_growth_steps, **options)
    if isinstance(optimizer, keras.optimizers.Optimizer):
        # keras.mixed_precision.global_policy: Keras 3.0 has no keras.config.dtype_policy.
        if keras.mixed_precision.global_policy().name == "mixed_float16":
            return DistributedLossScaleOptimizer(optimizer, **options)
        return DistributedKerasOptimizer(optimizer, **options)
    if _tf_keras.is_tf_keras_optimizer(optimizer):
        options.pop("name")
        if options.pop("shard_optimizer_state"):
            return _tf_keras_sharded.distribute(optimizer, **options)
        return _tf_keras.distribute(optimizer, **options)
    raise TypeError(f"tfring.keras.DistributedOptimizer needs a Keras optimizer (Keras 3, or "
                    f"tf_keras with TF_USE_LEGACY_KERAS=1). Received: {type(optimizer)!r}")


def is_keras_optimizer(optimizer):
    """Whether `optimizer` is a Keras 3 or tf_keras optimizer (what DistributedOptimizer
    wraps)."""
    return isinstance(optimizer, keras.optimizers.Optimizer) or \
        _tf_keras.is_tf_keras_optimizer(optimizer)


def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                                compression=Compression.none, sparse_as_dense=False,
                                gradient_predivide_factor=1.0, op=collectives.Average,
                                backward_passes_per_step=1, average_aggregated_gradients=False,
                                groups=None, process_set=global_process_set,
                                scale_local_gradients=True, local_layers=None,
                                shard_optimizer_state=False):
    """A DistributedOptimizer that leaves the gradients of `local_layers` (Keras layers:
    one, or a list) unreduced, as Horovod's: each rank trains those layers on its own data
    (their gradients divided by the set's size when scale_local_gradients is on). Give the
    same layers' variables to BroadcastGlobalVariablesCallback(local_variables=...) to keep
    their initial values local too. shard_optimizer_state=True is refused with local layers."""
    from tfring._training.gradient_tape import _local_layers
    layers = _local_layers(local_layers)
    if shard_optimizer_state and layers:
        raise ValueError("PartialDistributedOptimizer: shard_optimizer_state=True cannot keep "
                         "local_layers local: every rank updates a block of every variable "
                         "with the gradient reduced over all ranks, so no rank's gradient of "
                         "a layer stays its own. Use one or the other.")
    distributed = DistributedOptimizer(
        optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse,
        compression=compression, sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor, op=op,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients, groups=groups,
        process_set=process_set, scale_local_gradients=scale_local_gradients,
        shard_optimizer_state=shard_optimizer_state)
    for layer in layers:
        for variable in layer.trainable_weights:
            distributed.register_local_var(variable)
    return distributed


class _DistributedMixin:
    """What both Keras 3 wrappers share: options, accumulation, and reduce-then-apply."""

    def _init_distributed(self, compression, sparse_as_dense, backward_passes_per_step, op,
                          gradient_predivide_factor, average_aggregated_gradients, groups,
                          process_set=global_process_set, scale_local_gradients=True,
                          shard_optimizer_state=False):
        _gradients.check_options(op, gradient_predivide_factor, backward_passes_per_step,
                                 average_aggregated_gradients)
        if isinstance(compression, str):
            compression = _COMPRESSIONS[compression]
        self._sharded = None
        if shard_optimizer_state:
            _sharded.check_options(op, process_set, groups)
            self._sharded = _sharded.ShardedKerasState(
                self.inner_optimizer, f"{_KIND}.sharded", compression, op,
                gradient_predivide_factor)
        self._local_vars = _gradients.LocalVariables()
        self._reduce_options = dict(op=op, compression=compression,
                                    sparse_as_dense=sparse_as_dense,
                                    gradient_predivide_factor=gradient_predivide_factor,
                                    groups=groups, process_set=process_set,
                                    local_variables=self._local_vars,
                                    scale_local_gradients=scale_local_gradients)
        self.backward_passes_per_step = int(backward_passes_per_step)
        self.average_aggregated_gradients = bool(average_aggregated_gradients)
        self._accumulator = None

    def register_local_var(self, var):
        """Horovod's: `var`'s gradient stays this rank's own (not reduced over ranks)."""
        if self._sharded is not None:
            raise ValueError("shard_optimizer_state=True cannot keep a variable local: its "
                             "optimizer state is split over the ranks' blocks.")
        self._local_vars.add(var)

    def _build_inner(self, var_list, build_fn):
        """build_fn(variables) builds the wrapped optimizer on the model's variables, or
        (sharded) on this rank's blocks of them."""
        # Not through Keras's attribute tracking, which would count the model's variables
        # among the optimizer's own (and save them with it).
        object.__setattr__(self, "_model_variables", tuple(var_list))
        if self._sharded is None:
            build_fn(var_list)
        else:
            self._sharded.build_inner(var_list, build_fn)

    def gather_state(self):
        """Collective (every rank calls it): with shard_optimizer_state=True, sends every
        rank's blocks of the optimizer state to rank 0, for rank 0 to save the whole state.
        tfring's callbacks call it at each epoch's end. Does nothing otherwise."""
        if self._sharded is not None and self.built:
            self._sharded.checkpoint.gather()

    def _build_distributed(self, var_list):
        if self.backward_passes_per_step == 1 or self._accumulator is not None:
            return
        # Local state, not optimizer variables: see tfring/_training/accumulation.py.
        self._accumulator = _accumulation.GradientAccumulator(
            self.backward_passes_per_step, self.average_aggregated_gradients)
        self._accumulator.build(var_list)

    def _apply_distributed(self, grads, trainable_variables, apply_fn):
        """Builds on first use, reduces `grads`, then apply_fn(reduced, variables): the
        model's variables, or (sharded) this rank's blocks and their gradients."""
        if trainable_variables is None:
            if not self.built:
                raise ValueError(f"{self.name}: pass the variables with the first gradients "
                                 "(apply_gradients(zip(grads, variables))), or build() first.")
            trainable_variables = self._model_variables
        variables = list(trainable_variables)
        if not self.built:
            with keras.name_scope(self.name, caller=self):
                self.build(variables)
            self.built = True
        _xla.check_not_in_xla(f"tfring.keras.DistributedOptimizer '{self.name}'")
        if self._sharded is not None:
            sparse = self._reduce_options["sparse_as_dense"]

            def reduce_and_apply(grads):
                self._sharded.step(_sharded.dense(grads, variables, sparse), variables,
                                   apply_fn)
        else:
            def reduce_and_apply(grads):
                apply_fn(_gradients.allreduce_gradients(
                    grads, variables, kind=_KIND, **self._reduce_options), variables)
        self._accumulate_then(list(grads), reduce_and_apply)

    def _accumulate_then(self, grads, reduce_and_apply):
        """reduce_and_apply(grads), or with N > 1 of the sums of every N passes' gradients."""
        if self.backward_passes_per_step == 1:
            reduce_and_apply(grads)
            return
        accumulator = self._accumulator
        is_update = accumulator.add(grads)

        def update():
            totals = accumulator.totals(grads)
            reduce_and_apply(totals)
            accumulator.reset_after(totals)
            return tf.no_op()

        tf.cond(is_update, update, tf.no_op)

    # Keras's saving (model.save, save_weights, ModelCheckpoint) writes what the plain
    # optimizer writes: its own variables (_saved_own_variables), then the wrapped
    # optimizer's, whole and in its unsharded order where the state is sharded.
    def _saved_own_variables(self):
        return keras3.own_variables(self)

    def save_own_variables(self, store):
        own = [v.numpy() for v in self._saved_own_variables()]
        if self._sharded is None:
            inner = [v.numpy() for v in self.inner_optimizer.variables]
        else:
            inner = self._sharded.values_to_save()
        for i, value in enumerate(own + inner):
            store[str(i)] = value

    def load_own_variables(self, store):
        values = [store[str(i)] for i in range(len(store.keys()))]
        own = self._saved_own_variables()
        inner = (len(self.inner_optimizer.variables) if self._sharded is None
                 else self._sharded.saved_count())
        unused = len(keras3.own_variables(self)) - len(own)
        if unused and len(values) == unused + len(own) + inner:
            values = values[unused:]  # a file that also saved the unused ones, first: skip them
        if len(values) != len(own) + inner and self._sharded is None:
            warnings.warn(  # as Keras's own optimizers do
                f"Skipping variable loading for optimizer '{self.name}', because it has "
                f"{len(own) + inner} variables whereas the saved optimizer has {len(values)} "
                "variables.", stacklevel=2)
            return
        for variable, value in zip(own, values):
            variable.assign(value)
        if self._sharded is None:
            for variable, value in zip(self.inner_optimizer.variables, values[len(own):]):
                variable.assign(value)
        else:
            self._sharded.load(values[len(own):])  # says so if the count is wrong

    def _distributed_config(self):
        compression = next((k for k, v in _COMPRESSIONS.items()
                            if v is self._reduce_options["compression"]), "none")
        groups = self._reduce_options["groups"]
        return {"compression": compression,
                "sparse_as_dense": self._reduce_options["sparse_as_dense"],
                "backward_passes_per_step": self.backward_passes_per_step,
                "op": self._reduce_options["op"],
                "gradient_predivide_factor": self._reduce_options["gradient_predivide_factor"],
                "average_aggregated_gradients": self.average_aggregated_gradients,
                # Lists of variables cannot be saved; a reload reduces them ungrouped.
                "groups": groups if isinstance(groups, int) else None,
                "shard_optimizer_state": self._sharded is not None}


@keras.saving.register_keras_serializable(package="tfring")
class DistributedKerasOptimizer(tf_internals.ChildrenHook, _DistributedMixin,
                                keras.optimizers.Optimizer):
    """A Keras 3 optimizer that reduces gradients over ranks, then applies `inner_optimizer`.

    Made by tfring.keras.DistributedOptimizer; see it for the arguments.
    """

    def __init__(self, inner_optimizer, name=None, compression=Compression.none,
                 sparse_as_dense=False, backward_passes_per_step=1, op=collectives.Average,
                 gradient_predivide_factor=1.0, average_aggregated_gradients=False,
                 groups=None, process_set=global_process_set, scale_local_gradients=True,
                 shard_optimizer_state=False, **kwargs):
        super().__init__(learning_rate=0.0,
                         name=name or f"Distributed{type(inner_optimizer).__name__}", **kwargs)
        self.inner_optimizer = inner_optimizer
        self._init_distributed(compression, sparse_as_dense, backward_passes_per_step, op,
                               gradient_predivide_factor, average_aggregated_gradients, groups,
                               process_set, scale_local_gradients, shard_optimizer_state)

    def build(self, var_list):
        self._build_inner(var_list, self.inner_optimizer.build)
        self._build_distributed(var_list)
        super().build(var_list)
        # Keras's saving visits the wrapped optimizer too. A file written by a plain Keras
        # optimizer has no entry for it (the wrapper's own entry holds the state): nothing
        # to load there, rather than Keras's warning or the sharded state's error.
        inner, load = self.inner_optimizer, self.inner_optimizer.load_own_variables

        def load_own_variables(store):
            if len(store.keys()):
                load(store)

        inner.load_own_variables = load_own_variables

    @property
    def variables(self):
        return keras3.own_variables(self) + self.inner_optimizer.variables

    def _saved_own_variables(self):
        # None: the wrapper's step counter and learning rate are unused (the wrapped
        # optimizer's count), and a plain Keras optimizer then loads the file.
        return []

    def checkpoint_children(self, parent_children, save_type, **kwargs):
        # The wrapped optimizer's children as its own: a TensorFlow checkpoint of the
        # wrapper is the plain optimizer's (restores without tfring, and the reverse). The
        # wrapper's own step counter and learning rate are unused.
        if self._sharded is not None:
            return self._sharded.checkpoint_children(self.name)
        return tf_internals.trackable_children(self.inner_optimizer, save_type, **kwargs)

    def apply(self, grads, trainable_variables=None):
        self._apply_distributed(grads, trainable_variables, self.inner_optimizer.apply)

    @property
    def learning_rate(self):
        return self.inner_optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, learning_rate):
        self.inner_optimizer.learning_rate = learning_rate

    @property
    def iterations(self):
        return self.inner_optimizer.iterations

    @iterations.setter
    def iterations(self, value):
        # Older Keras 3 releases (3.2) assign their own step counter in the base __init__; the
        # inner optimizer's counter is the one that counts applied steps.
        self._unused_own_iterations = value

    def scale_loss(self, loss):
        return self.inner_optimizer.scale_loss(loss)

    def finalize_variable_values(self, var_list):
        self.inner_optimizer.finalize_variable_values(var_list)

    def get_config(self):
        return {"name": self.name,
                "inner_optimizer": keras.saving.serialize_keras_object(self.inner_optimizer),
                **self._distributed_config()}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        inner = keras.saving.deserialize_keras_object(config.pop("inner_optimizer"),
                                                      custom_objects=custom_objects)
        return cls(inner, **config)


@keras.saving.register_keras_serializable(package="tfring")
class DistributedLossScaleOptimizer(tf_internals.ChildrenHook, _DistributedMixin,
                                    keras.optimizers.LossScaleOptimizer):
    """A LossScaleOptimizer that reduces the (scaled) gradients over ranks before it tests
    them for inf/nan, so every rank skips or applies the same steps.

    Made by tfring.keras.DistributedOptimizer for a LossScaleOptimizer or under the
    mixed_float16 policy; see it for the arguments.
    """

    def __init__(self, inner_optimizer, initial_scale=2.0 ** 15, dynamic_growth_steps=2000,
                 name=None, compression=Compression.none, sparse_as_dense=False,
                 backward_passes_per_step=1, op=collectives.Average,
                 gradient_predivide_factor=1.0, average_aggregated_gradients=False,
                 groups=None, process_set=global_process_set, scale_local_gradients=True,
                 shard_optimizer_state=False, **kwargs):
        super().__init__(inner_optimizer, initial_scale=initial_scale,
                         dynamic_growth_steps=dynamic_growth_steps,
                         name=name or f"Distributed{type(inner_optimizer).__name__}", **kwargs)
        self._init_distributed(compression, sparse_as_dense, backward_passes_per_step, op,
                               gradient_predivide_factor, average_aggregated_gradients, groups,
                               process_set, scale_local_gradients, shard_optimizer_state)

    def build(self, var_list):
        self._build_inner(var_list, super().build)
        self._build_distributed(var_list)

    def check_finite(self, grads):
        # Sharded, each rank tests its block of the gradients: every rank must take the
        # same branch (apply, or skip and lower the scale), so the answer is all ranks'.
        finite = super().check_finite(grads)
        return finite if self._sharded is None else self._sharded.all_finite(finite)

    def apply(self, grads, trainable_variables=None):
        # The LossScaleOptimizer's own apply: unscale, test for inf/nan, apply or skip.
        self._apply_distributed(grads, trainable_variables, super().apply)

    def checkpoint_children(self, parent_children, save_type, **kwargs):
        children = parent_children()
        if self._sharded is not None:  # the LossScaleOptimizer's own variables as they are
            self._sharded.checkpoint_children(self.name)  # refuses one not built yet
            children["inner_optimizer"] = self._sharded.checkpoint.trackable_object()
            if keras3.TRAINABLE_VARIABLES_CHILD in children:  # built on blocks: the model's
                if getattr(self, "_checkpointed_model_variables", None) is None:
                    # One object, kept: a checkpoint matches objects by identity.
                    object.__setattr__(self, "_checkpointed_model_variables",
                                       tf_internals.wrap_trackable(
                                           list(self._model_variables)))
                children[keras3.TRAINABLE_VARIABLES_CHILD] = self._checkpointed_model_variables
        return children

    def get_config(self):
        return {**super().get_config(), **self._distributed_config()}


def load_model(filepath, custom_optimizers=None, custom_objects=None,
               compression=Compression.none):
    """Loads a Keras model whose optimizer is (or becomes) a tfring DistributedOptimizer.

    A model saved with a tfring wrapper comes back wrapped, with its options and state; a
    model saved with a plain optimizer gets it wrapped (with `compression`), as Horovod's
    load_model does.

    Args:
        filepath: a `.keras` file (Keras 3), or what tf_keras's load_model takes.
        custom_optimizers: optimizer classes the model may use that Keras does not know.
        custom_objects: other custom layers, losses, ... (a dict), as for Keras.
        compression: for an optimizer that was saved unwrapped.

    Returns:
        The model, compiled as it was saved, its optimizer distributed.
    """
    objects = dict(custom_objects or {})
    for cls in custom_optimizers or ():
        objects[cls.__name__] = cls
    if _tf_keras.legacy_keras_active():
        model = tf.keras.models.load_model(filepath, custom_objects=objects)
    else:
        objects.update(DistributedKerasOptimizer=DistributedKerasOptimizer,
                       DistributedLossScaleOptimizer=DistributedLossScaleOptimizer)
        model = keras.saving.load_model(filepath, custom_objects=objects)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and not is_distributed(optimizer):
        model.optimizer = DistributedOptimizer(optimizer, compression=compression)
    return model


def is_distributed(optimizer):
    """True for an optimizer that tfring.keras.DistributedOptimizer made or hooked."""
    return isinstance(optimizer, _DistributedMixin) or _tf_keras.is_distributed(optimizer)


_xla.install_keras_jit_guard(is_distributed)


def broadcast_global_variables(root_rank):
    """TF1 graphs: an op broadcasting every global variable (see tfring's). In eager Keras,
    use callbacks.BroadcastGlobalVariablesCallback(root_rank) or tfring.broadcast_variables."""
    return functions.broadcast_global_variables(root_rank)
