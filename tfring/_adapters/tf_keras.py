"""tf_keras's (Keras 2's, TF_USE_LEGACY_KERAS=1) private names that tfring uses
(tfring/_adapters/__init__.py says why here). tf_keras is imported only when a function or
probe needs it.

The in-place DistributedOptimizer (tfring/keras/_tf_keras.py, _tf_keras_sharded.py) meets
tf_keras's optimizers through the functions below: where they aggregate and compute
gradients, how a legacy optimizer builds and restores its slots, a LossScaleOptimizer's
dynamic scale.
"""

from tfring._adapters._hooks import Hook, has_any_attribute, has_attributes


def _tf_keras():
    import tf_keras
    return tf_keras


def _optimizer_class():
    return _tf_keras().optimizers.Optimizer


def _legacy_optimizer_class():
    return _tf_keras().optimizers.legacy.Optimizer


def _hdf5_format():
    from tf_keras.src.saving.legacy import hdf5_format
    return hdf5_format


def _loss_scale_state():
    keras2 = _tf_keras()
    return keras2.mixed_precision.LossScaleOptimizer(keras2.optimizers.legacy.SGD())._loss_scale


def _built_probe():
    import tensorflow as tf
    optimizer = _tf_keras().optimizers.SGD()
    optimizer.build([tf.Variable([0.0])])
    return "" if getattr(optimizer, "_built", None) is True else \
        "a built tf_keras optimizer has no _built = True"


HOOKS = (
    Hook("optimizers.Optimizer._use_weight_decay, ._var_key, ._clip_gradients",
         "weight decay and clipping of a sharded optimizer (as Keras 3's: keras3.py)",
         "none known", has_attributes(_optimizer_class, "_use_weight_decay", "_var_key",
                                      "_clip_gradients")),
    Hook("optimizers.legacy.Optimizer._clipnorm_fn, ._global_clipnorm_fn",
         "a sharded legacy optimizer clips with norms summed over every rank's block",
         "none known", has_attributes(lambda: _tf_keras().optimizers.legacy.SGD(clipnorm=1.0),
                                      "_clipnorm_fn", "_global_clipnorm_fn")),
    Hook("optimizers.Optimizer._built", "whether a tf_keras optimizer is built (it has no "
         "public `built`)", "none known",
         lambda: _built_probe()),
    Hook("optimizers.legacy.Optimizer._hyper", "the schedule behind a legacy optimizer's "
         "learning rate", "none known",
         has_attributes(lambda: _tf_keras().optimizers.legacy.SGD(), "_hyper")),
    Hook("callbacks.Callback._supports_tf_logs", "a tfring callback that never reads logs "
         "spares tf_keras their conversion to numpy", "none known",
         has_attributes(lambda: _tf_keras().callbacks.Callback(), "_supports_tf_logs")),
    Hook("layers.BatchNormalization._calculate_mean_and_var", "SyncBatchNormalization: "
         "batch statistics over every rank's batch", "none known",
         has_attributes(lambda: _tf_keras().layers.BatchNormalization,
                        "_calculate_mean_and_var")),
    Hook("optimizers Optimizer/legacy: _aggregate_gradients, _compute_gradients, "
         "_create_all_weights, _create_or_restore_slot_variable",
         "DistributedOptimizer hooked in place (reduce in aggregation; Horovod's "
         "_compute_gradients; slots built before accumulation's tf.cond; whole slots in TF "
         "checkpoints of a sharded legacy optimizer)", "none known",
         lambda: has_any_attribute(_optimizer_class, "aggregate_gradients",
                                   "_aggregate_gradients")() or
         has_attributes(_legacy_optimizer_class, "_aggregate_gradients", "_compute_gradients",
                        "_create_all_weights", "_create_or_restore_slot_variable")()),
    Hook("mixed_precision.LossScaleOptimizer._loss_scale.update", "every rank skips or "
         "applies a step of a sharded LossScaleOptimizer alike", "none known",
         has_attributes(_loss_scale_state, "update")),
    Hook("tf_keras.src.saving.legacy.hdf5_format.save_optimizer_weights_to_hdf5_group",
         "HDF5 files of a sharded optimizer hold its whole state", "none known",
         has_attributes(_hdf5_format, "save_optimizer_weights_to_hdf5_group",
                        "save_attributes_to_hdf5_group")),
)


def replace_legacy_clipping(optimizer, clip):
    """Makes a tf_keras legacy optimizer clip by norm with clip(grads) (the clipped list,
    or None to keep the gradients); its clipvalue, element by element, stays its own."""
    def clip_pairs(grads_and_vars):
        pairs = list(grads_and_vars)
        clipped = clip([g for g, _ in pairs])
        return pairs if clipped is None else list(zip(clipped, [v for _, v in pairs]))

    if optimizer.clipnorm is not None:
        optimizer._clipnorm_fn = clip_pairs
    if optimizer.global_clipnorm is not None:
        optimizer._global_clipnorm_fn = clip_pairs


def is_built(optimizer):
    """Whether an optimizer is built: Keras 3's public `built`, else tf_keras's `_built`."""
    built = getattr(optimizer, "built", None)
    return bool(getattr(optimizer, "_built", False) if built is None else built)


def skip_logs_conversion(callback):
    """tf_keras converts the logs to numpy for a callback unless it says it takes tensors;
    Keras 3 ignores the flag."""
    callback._supports_tf_logs = True


def legacy_learning_rate(optimizer):
    """What a legacy optimizer keeps as its learning rate (a schedule among its hypers),
    or None for another optimizer."""
    hypers = getattr(optimizer, "_hyper", None)
    return hypers.get("learning_rate") if isinstance(hypers, dict) else None


def batch_norm_with_moments(moments):
    """A subclass of tf_keras.layers.BatchNormalization whose batch statistics are
    moments(inputs, reduction_axes, keep_dims, mask) -> (mean, variance)."""
    import tf_keras

    class BatchNormalizationWithMoments(tf_keras.layers.BatchNormalization):
        def _calculate_mean_and_var(self, inputs, reduction_axes, keep_dims, mask=None):
            return moments(inputs, reduction_axes, keep_dims, mask)

    return BatchNormalizationWithMoments


def hdf5_format():
    """tf_keras's HDF5 writer module (HDF5 files of a sharded optimizer hold its whole
    state: _tf_keras_sharded.py replaces its optimizer writer)."""
    return _hdf5_format()


def is_legacy(optimizer):
    """A tf_keras.optimizers.legacy optimizer (slots made by add_slot, kept per variable,
    built by _create_all_weights)."""
    return hasattr(optimizer, "_create_all_weights") and hasattr(optimizer, "add_slot")


def is_new_optimizer(optimizer):
    """A tf_keras.optimizers optimizer (built by build(), aggregating in
    aggregate_gradients, clipping in _clip_gradients)."""
    return hasattr(optimizer, "aggregate_gradients") and hasattr(optimizer, "_clip_gradients")


def legacy_build(optimizer):
    """A legacy optimizer's build: its _create_all_weights(variables)."""
    return optimizer._create_all_weights


def set_legacy_build(optimizer, build):
    """Makes build(variables) what the legacy optimizer calls to make its weights."""
    optimizer._create_all_weights = build


def hook_gradients(optimizer, aggregate, compute):
    """Makes `optimizer` reduce in aggregate(grads_and_vars) wherever apply_gradients
    aggregates (aggregate_gradients, or the legacy _aggregate_gradients; Horovod's name
    _aggregate_gradients too), and compute(loss, var_list, grad_loss=None, tape=None) its
    _compute_gradients (Horovod's hook for scripts). Returns the optimizer's own
    _compute_gradients, or None where it has none."""
    own_compute = getattr(optimizer, "_compute_gradients", None)
    if hasattr(optimizer, "aggregate_gradients"):
        optimizer.aggregate_gradients = aggregate
    optimizer._aggregate_gradients = aggregate
    optimizer._compute_gradients = compute
    return own_compute


def dynamic_loss_scale(optimizer):
    """A LossScaleOptimizer's dynamic scale (its update(grads) decides a step's finite
    test and the new scale), or None for a fixed one or another optimizer."""
    scale = getattr(optimizer, "_loss_scale", None)
    return scale if scale is not None and hasattr(scale, "update") else None


def hook_legacy_slots(optimizer, get_slot, create_or_restore):
    """Makes a legacy optimizer answer get_slot(var, slot_name) and, restoring a
    checkpoint, create_or_restore(slot_variable_position, slot_name, variable, ...) with
    tfring's; returns its own (get_slot, create_or_restore) to fall back on."""
    own = optimizer.get_slot, optimizer._create_or_restore_slot_variable
    object.__setattr__(optimizer, "get_slot", get_slot)
    object.__setattr__(optimizer, "_create_or_restore_slot_variable", create_or_restore)
    return own


def optimizer_name(optimizer):
    """An optimizer's name (a LossScaleOptimizer's is its wrapped optimizer's)."""
    return getattr(optimizer, "name", None) or getattr(optimizer, "_name", None)

