"""Keras 3's private names that tfring uses (tfring/_adapters/__init__.py says why here).

The weight-decay and clipping hooks serve tf_keras's (Keras 2's) new optimizers too, which
have the same names; tfring/_adapters/tf_keras.py probes them there.
"""

import keras

from tfring._adapters._hooks import Hook, has_any_attribute, has_attributes


def _optimizer_class():
    return keras.optimizers.Optimizer


def _trainer_module():
    from keras.src.trainers import trainer
    return trainer


def _trainable_variables_child_probe():
    optimizer = keras.optimizers.SGD()
    optimizer.build([keras.Variable([0.0])])
    children_of = getattr(optimizer, "_trackable_children", None)
    if children_of is None:
        # Keras 3.0 and 3.1: an optimizer is no TensorFlow trackable, so a checkpoint has no
        # such child to name (tfring/keras/optimizer.py renames it only where it is there).
        return ""
    children = children_of("checkpoint")
    return "" if TRAINABLE_VARIABLES_CHILD in children else \
        f"a built optimizer's checkpoint children are {sorted(children)}"


HOOKS = (
    Hook("Optimizer._is_excluded_from_weight_decay (3.16+) or ._use_weight_decay",
         "which model variables a sharded optimizer decays, before it is built (it is built "
         "on tfring's blocks, not on the model's variables)",
         "none known", has_any_attribute(_optimizer_class, "_is_excluded_from_weight_decay",
                                         "_use_weight_decay")),
    Hook("Optimizer._var_key", "the key under which an optimizer excludes a variable from "
         "weight decay (tfring's block without decay)", "none known",
         has_attributes(_optimizer_class, "_var_key")),
    Hook("Optimizer._clip_gradients", "clipnorm/global_clipnorm of a sharded optimizer with "
         "norms summed over every rank's block", "none known",
         has_attributes(_optimizer_class, "_clip_gradients")),
    Hook("keras.src.trainers.trainer.model_supports_jit", "jit_compile='auto' resolves to "
         "False for a model whose tfring optimizer cannot run under XLA here",
         "none known (model.jit_compile = False after compile is public: tfring sets it too)",
         has_attributes(_trainer_module, "model_supports_jit")),
    Hook("BatchNormalization._moments, ._reduction_axes", "SyncBatchNormalization: batch "
         "statistics over every rank's batch", "none known (Keras's synchronized=True works "
         "through tf.distribute, not tfring)",
         has_attributes(lambda: keras.layers.BatchNormalization, "_moments"),
         when_missing="SyncBatchNormalization refuses to be made, saying it needs Keras 3.1 "
                      "(Keras 3.0 computes batch statistics without _moments)"),
    Hook("Optimizer._trainable_variables (a checkpoint child's name)", "a sharded "
         "LossScaleOptimizer's checkpoint names the model's variables there, not the blocks",
         "none known", lambda: _trainable_variables_child_probe()),
    Hook("Optimizer._learning_rate", "the LearningRateSchedule behind an optimizer (its "
         "public learning_rate is the schedule's current value)", "none known",
         lambda: "" if "_learning_rate" in vars(keras.optimizers.SGD(learning_rate=
                                                  keras.optimizers.schedules.ExponentialDecay(
                                                      0.1, 10, 0.5)))
         else "an optimizer keeps its schedule under another name than _learning_rate"),
)


# The checkpoint child under which a built Keras optimizer saves the variables it was built
# on (its `_trainable_variables`): a sharded LossScaleOptimizer names the model's there.
TRAINABLE_VARIABLES_CHILD = "_trainable_variables"


def uses_weight_decay(optimizer, variable):
    """Whether `optimizer` (Keras 3, or tf_keras's new optimizers) decays `variable`, from its
    exclusion settings: also before it is built, and for a variable it is not built on."""
    excluded = getattr(optimizer, "_is_excluded_from_weight_decay", None)  # Keras 3.16+
    if excluded is not None:
        return not excluded(variable)
    # Keras <= 3.15 and tf_keras decide the same from the settings, built or not.
    return optimizer._use_weight_decay(variable)


def exclude_from_weight_decay(optimizer, variables):
    """Adds `variables` to what `optimizer` does not decay, keeping what the user excluded
    (the public exclude_from_weight_decay() replaces it). Before the optimizer is built:
    Keras 3.16 fixes each variable's decay when it builds."""
    keys = {optimizer._var_key(v) for v in variables}
    optimizer._exclude_from_weight_decay = set(
        getattr(optimizer, "_exclude_from_weight_decay", ())) | keys
    if hasattr(optimizer, "_exclude_from_weight_decay_cache"):  # Keras <= 3.15 caches answers
        optimizer._exclude_from_weight_decay_cache = {}


def replace_gradient_clipping(optimizer, clip):
    """Makes `optimizer` (Keras 3, tf_keras's new optimizers) clip its gradients with
    clip(grads), which returns the clipped list, or None to leave them to the optimizer's own
    clipping (clipvalue, element by element). False, changing nothing, where the optimizer
    has no such hook (tf_keras's legacy ones: tf_keras.replace_legacy_clipping)."""
    own = getattr(optimizer, "_clip_gradients", None)
    if own is None:
        return False

    def clip_gradients(grads):
        clipped = clip(grads)
        return own(grads) if clipped is None else clipped

    optimizer._clip_gradients = clip_gradients
    return True


def wrap_model_supports_jit(wrap):
    """Replaces Keras's model_supports_jit(model), which resolves jit_compile='auto', by
    wrap(original), once per process. False, changing nothing, where this Keras has none."""
    try:
        trainer = _trainer_module()
        original = trainer.model_supports_jit
    except (ImportError, AttributeError):
        return False
    if getattr(original, "_tfring_guard", False):
        return True
    guarded = wrap(original)
    guarded._tfring_guard = True
    trainer.model_supports_jit = guarded
    return True


def batch_norm_with_moments(moments):
    """A subclass of keras.layers.BatchNormalization whose batch statistics are
    moments(inputs, reduction_axes, mask) -> (mean, variance). On Keras 3.0, whose layer
    computes them without `_moments`, one that refuses to be made: replacing a method the
    layer never calls would leave each rank's statistics its own, silently."""
    if not hasattr(keras.layers.BatchNormalization, "_moments"):
        class BatchNormalizationRefused(keras.layers.BatchNormalization):
            def __init__(self, *args, **kwargs):
                raise RuntimeError(
                    f"tfring.SyncBatchNormalization needs Keras 3.1 or newer: Keras "
                    f"{keras.__version__}'s BatchNormalization computes its batch statistics "
                    "where tfring cannot take them over every rank (pip install -U "
                    "'keras>=3.1')")

        return BatchNormalizationRefused

    class BatchNormalizationWithMoments(keras.layers.BatchNormalization):
        def _moments(self, inputs, mask):
            return moments(inputs, self._reduction_axes, mask)

    return BatchNormalizationWithMoments


def learning_rate_schedule(optimizer):
    """What the optimizer keeps as its learning rate: a schedule, a variable, or None."""
    return getattr(optimizer, "_learning_rate", None)


def own_variables(optimizer):
    """An optimizer's own variables (its step counter, learning rate, slots), without those
    of an optimizer it wraps: what the base class's public `variables` gives, whatever a
    subclass (tfring's wrappers, LossScaleOptimizer) adds to it. No private name."""
    return keras.optimizers.Optimizer.variables.fget(optimizer)
