"""shard_optimizer_state=True for tf_keras optimizers (TF_USE_LEGACY_KERAS=1), hooked in
place as tfring hooks them unsharded (_tf_keras.py): `apply_gradients` on the object
reduce-scatters the gradients, lets the optimizer's own apply_gradients update this rank's
blocks (it is built on them, so its slots are blocks), and allgathers the blocks into the
model's variables. The blocks, clipping over ranks and checkpoints are Keras 3's
(_sharded.py, _sharded_checkpoint.py): tf_keras.optimizers.Optimizer has the same hooks.
tf_keras.optimizers.legacy optimizers are built by their own build (not `build`) and keep
slots per variable: a TensorFlow checkpoint asks them for each model variable's slots, which
_legacy_slots_in_checkpoints answers whole.

The object gets `gather_state()` (as the Keras 3 wrapper), and checkpoints see it as the
same optimizer unsharded: Keras's .keras files through save_own_variables, tf.train.Checkpoint
(so tf_keras's TensorFlow-format save_weights and model.save) through its checkpoint
children, and HDF5 files through a hook on tf_keras's writer and through set_weights.
"""

import tensorflow as tf

from tfring._adapters import tf_internals
from tfring._adapters import tf_keras as tf_keras_hooks
from tfring.keras import _sharded, _tf_keras, _xla

_KIND = "keras.DistributedOptimizer.sharded"


def _refuse(optimizer, inner, process_set, groups, op):
    _sharded.check_options(op, process_set, groups)
    if not tf_keras_hooks.is_new_optimizer(inner) and not tf_keras_hooks.is_legacy(inner):
        raise ValueError(
            f"shard_optimizer_state=True needs an optimizer of tf_keras.optimizers or "
            f"tf_keras.optimizers.legacy (Adam, SGD, ...); {type(inner).__name__} is neither.")
    if inner is optimizer and tf.keras.mixed_precision.global_policy().name == "mixed_float16":
        # tf_keras would wrap it in a LossScaleOptimizer of its own at compile(), which
        # tests each rank's gradients before they are reduced.
        raise ValueError(
            "shard_optimizer_state=True under the mixed_float16 policy: wrap the optimizer in "
            "tf.keras.mixed_precision.LossScaleOptimizer before DistributedOptimizer, so that "
            "every rank skips or applies the same steps.")


def _agree_on_finite(optimizer, state):
    """A LossScaleOptimizer's dynamic scale decides on the gradients it is given: this
    rank's blocks. Its `update` is given one value instead, finite when every rank's blocks
    are, so every rank skips (and lowers the scale) or applies alike."""
    loss_scale = tf_keras_hooks.dynamic_loss_scale(optimizer)
    if loss_scale is None:
        return  # a fixed scale: every step applies
    own_update = loss_scale.update

    def update(grads):
        flat = [g for g in tf.nest.flatten(grads) if g is not None]
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in flat])
        everywhere = state.all_finite(finite)
        return own_update([tf.where(everywhere, 0.0, float("nan"))])

    loss_scale.update = update


def _hdf5_writes_whole_state():
    """tf_keras's HDF5 model.save (and ModelCheckpoint to a .h5 file) writes the
    optimizer's `variables`: with sharded state, this rank's blocks. Its writer is hooked
    (once, for every optimizer) to write a sharded optimizer's whole state instead, gathered
    as .keras files have it, under the unsharded names; loading calls `set_weights`, which
    a sharded optimizer takes whole (distribute() below)."""
    hdf5_format = tf_keras_hooks.hdf5_format()
    own = hdf5_format.save_optimizer_weights_to_hdf5_group
    if getattr(own, "tfring_sharded", False):
        return

    def save_optimizer_weights(hdf5_group, optimizer):
        state = getattr(optimizer, "_sharded", None)
        if not isinstance(state, _sharded.ShardedKerasState) or state.update is None:
            return own(hdf5_group, optimizer)
        values = state.values_to_save()  # refuses a state not gathered, saying why
        names = [n.encode("utf8") for n in state.checkpoint.names_to_save()]
        group = hdf5_group.create_group("optimizer_weights")
        hdf5_format.save_attributes_to_hdf5_group(group, "weight_names", names)
        for name, value in zip(names, values):
            dataset = group.create_dataset(name, value.shape, dtype=value.dtype)
            dataset[()] = value

    save_optimizer_weights.tfring_sharded = True
    hdf5_format.save_optimizer_weights_to_hdf5_group = save_optimizer_weights


def _legacy_slots_in_checkpoints(inner, state):
    """A TensorFlow checkpoint saves a legacy optimizer's slots as slots of the model's
    variables (get_slot(model variable, name)), and restores them through
    its slot restore: both are answered with the whole slot's checkpoint
    object (_sharded_tf_checkpoint.GatheredSlot), as the optimizer has it unsharded. Its
    own slots, of the blocks, stay its own."""
    def gathered(variable, slot_name):
        # Model variables only: the optimizer asks for its blocks' slots while a step is
        # traced, where the checkpoint's objects must not be made.
        if state.update is None or not state.update.holds(variable):
            return None
        return state.checkpoint.slot_of(variable, slot_name)

    def get_slot(var, slot_name):
        slot = gathered(var, slot_name)
        return own_get_slot(var, slot_name) if slot is None else slot

    def create_or_restore(slot_variable_position, slot_name, variable, *args, **kwargs):
        slot = gathered(variable, slot_name)
        if slot is None:
            return own_create_or_restore(slot_variable_position, slot_name, variable,
                                         *args, **kwargs)
        return slot

    own_get_slot, own_create_or_restore = tf_keras_hooks.hook_legacy_slots(
        inner, get_slot, create_or_restore)


def distribute(optimizer, compression, sparse_as_dense, backward_passes_per_step, op,
               gradient_predivide_factor, average_aggregated_gradients, groups, process_set,
               scale_local_gradients):
    """Hooks the tf_keras `optimizer` (in place) to keep this rank's blocks of its state
    only; returns it."""
    del scale_local_gradients  # no local variables: every gradient is reduced
    _tf_keras.check_not_distributed(optimizer)
    # A LossScaleOptimizer: the optimizer it wraps keeps the state.
    inner = getattr(optimizer, "inner_optimizer", None) or optimizer
    _refuse(optimizer, inner, process_set, groups, op)
    state = _sharded.ShardedKerasState(inner, _KIND, compression, op,
                                       gradient_predivide_factor, _sharded.tf_variable)
    legacy = tf_keras_hooks.is_legacy(inner)
    original_apply = optimizer.apply_gradients
    own_build = tf_keras_hooks.legacy_build(inner) if legacy else inner.build
    if inner is not optimizer:
        _agree_on_finite(optimizer, state)

    def build(variables):
        if state.update is None:
            with tf.init_scope():  # variables are made outside any function
                state.build_inner(list(variables), own_build)

    def apply_gradients(grads_and_vars, name=None, skip_gradients_aggregation=False,
                        **kwargs):
        _xla.check_not_in_xla("tfring.keras.DistributedOptimizer (tf_keras, sharded)")
        kwargs.pop("experimental_aggregate_gradients", None)
        pairs = list(grads_and_vars)
        grads, variables = [g for g, _ in pairs], [v for _, v in pairs]
        build(variables)

        def apply(block_grads, blocks):
            # Reduced already: the original apply must not aggregate again.
            if legacy:
                original_apply(list(zip(block_grads, blocks)), name=name,
                               experimental_aggregate_gradients=False)
            else:
                original_apply(list(zip(block_grads, blocks)), name=name,
                               skip_gradients_aggregation=True)

        state.step(_sharded.dense(grads, variables, sparse_as_dense), variables, apply)
        return optimizer.iterations

    def register_local_var(var):
        raise ValueError("shard_optimizer_state=True cannot keep a variable local: its "
                         "optimizer state is split over the ranks' blocks.")

    def gather_state():
        if state.update is not None:
            state.checkpoint.gather()

    def trackable_children(save_type="checkpoint", **kwargs):
        # tf_keras's LossScaleOptimizer has no name of its own: its wrapped optimizer's.
        return state.checkpoint_children(tf_keras_hooks.optimizer_name(optimizer) or
                                         tf_keras_hooks.optimizer_name(inner))

    optimizer.apply_gradients = apply_gradients
    optimizer.register_local_var = register_local_var
    optimizer.gather_state = gather_state
    # A LossScaleOptimizer delegates its checkpoint children to the optimizer it wraps.
    tf_internals.set_trackable_children(inner, trackable_children)
    optimizer._sharded = state
    # optimizer.build(model variables), as Keras and scripts call it, builds on the blocks;
    # the original apply_gradients calls it again with the blocks, which is then a no-op.
    sharded_build = lambda var_list: (own_build(var_list) if state.update is not None  # noqa
                                      else build(var_list))
    if legacy:  # its own build; its slots are kept per variable
        tf_keras_hooks.set_legacy_build(optimizer, sharded_build)
        tf_keras_hooks.set_legacy_build(inner, sharded_build)
        _legacy_slots_in_checkpoints(inner, state)
    else:
        optimizer.build = inner.build = sharded_build
    if inner is not optimizer:  # Keras saves it as its wrapped optimizer's variables
        optimizer.save_own_variables = lambda store: inner.save_own_variables(store)
        optimizer.load_own_variables = lambda store: inner.load_own_variables(store)
    # Whole values, as an HDF5 file (and the unsharded optimizer's get_weights) has them.
    optimizer.set_weights = inner.set_weights = lambda weights: state.load(list(weights))
    _hdf5_writes_whole_state()
    if int(backward_passes_per_step) > 1:
        _tf_keras.hook_accumulation(optimizer, int(backward_passes_per_step),
                                    average_aggregated_gradients, lambda pairs: pairs, [],
                                    build_slots=lambda _, variables: build(variables))
    _tf_keras.mark_distributed(optimizer)
    return optimizer
