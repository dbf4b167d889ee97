"""TensorFlow's private names that tfring uses (tfring/_adapters/__init__.py says why here).

Each is reached lazily or behind a guard, so that a release that moves one costs the
feature that needs it (with the probe's unit test failing), never `import tfring`.

The checkpoint protocol of `tf.__internal__.tracking.Trackable` (`_trackable_children`,
`_serialize_to_tensors`, `_restore_from_tensors`) is met through `ChildrenHook` and
`CheckpointLeaf`: tfring's classes define `checkpoint_children`, `tensors_to_save` and
`restore_tensors` instead.
"""

import tensorflow as tf

from tfring._adapters._hooks import Hook, has_attributes


def _eager_tensor_class():
    from tensorflow.python.framework import ops
    return ops.EagerTensor


def _import(module):
    import importlib
    return importlib.import_module(module)


HOOKS = (
    Hook("tensorflow.python.pywrap_tfe.TFE_Py_FastPathExecute, eager.context._context, "
         "eager.core._NotOkStatusException/_FallbackException, "
         "framework.ops.raise_from_not_ok_status",
         "a small eager allreduce through TensorFlow's own fast path, as its generated op "
         "wrappers call it (tfring/_ops/eager_call.py; without it, the generated wrapper)",
         "none known", lambda: "" if fast_path() is not None else
         "one of TensorFlow's eager fast-path internals is gone"),
    Hook("tensorflow.python.ops.control_flow_util.GraphOrParentsInXlaContext",
         "whether a function is being traced for XLA (jit_compile=True)", "none known",
         has_attributes(lambda: _import("tensorflow.python.ops.control_flow_util"),
                        "GraphOrParentsInXlaContext")),
    Hook("tensorflow.python.framework.auto_control_deps.MUST_RUN_ORDER_INSENSITIVE_STATEFUL_OPS",
         "tf.function leaves tfring's collectives unordered, so a step's are fused",
         "none known", has_attributes(
             lambda: _import("tensorflow.python.framework.auto_control_deps"),
             "MUST_RUN_ORDER_INSENSITIVE_STATEFUL_OPS")),
    Hook("tensorflow.python.training.saving.saveable_object.SaveSpec",
         "a sharded optimizer's slot saved whole, computed when the checkpoint is written",
         "none known", has_attributes(
             lambda: _import("tensorflow.python.training.saving.saveable_object"),
             "SaveSpec")),
    Hook("tf.__internal__.tracking.Trackable (._trackable_children, ._serialize_to_tensors, "
         "._restore_from_tensors), tf.__internal__.tracking.wrap",
         "checkpoints of tfring's optimizer wrappers and sharded state read as the plain "
         "optimizer's", "none known",
         lambda: has_attributes(lambda: tf.__internal__.tracking, "Trackable", "wrap")() or
         has_attributes(lambda: tf.__internal__.tracking.Trackable, "_trackable_children",
                        "_serialize_to_tensors", "_restore_from_tensors")()),
    Hook("tf.compat.v1.train.Optimizer._create_slots", "TF1 DistributedOptimizer with "
         "backward_passes_per_step > 1 makes the slots outside accumulation's tf.cond",
         "none known", has_attributes(lambda: tf.compat.v1.train.Optimizer, "_create_slots")),
    Hook("tensorflow.python.autograph.core.config.CONVERSION_RULES, DoNotConvert",
         "autograph leaves tfring's own Python alone when it traces a user's function, as it "
         "leaves TensorFlow's and Keras's (a first trace of a step with three collectives: "
         "1.7 s of conversion without it, 0.1 s with)",
         "tf.autograph.experimental.do_not_convert on every entry point (which misses the "
         "methods Keras's train step calls on tfring's optimizer wrappers)",
         has_attributes(lambda: _import("tensorflow.python.autograph.core.config"),
                        "CONVERSION_RULES", "DoNotConvert"),
         when_missing="autograph converts tfring's Python as it does a user's: the same "
                      "results, slower first traces"),
    Hook("tensorflow.python.framework.ops.EagerTensor (._datatype_enum)", "what eager ops "
         "return, and its dtype on the eager call's hot path",
         "isinstance(t, tf.Tensor) and tf.executing_eagerly(); tensor.dtype.as_datatype_enum "
         "(slower)", has_attributes(_eager_tensor_class, "_datatype_enum")),
)


def fast_path():
    """(TFE_Py_FastPathExecute, eager context getter, NotOkStatus, Fallback,
    raise_from_not_ok_status) as TensorFlow's generated op wrappers use them, or None where
    this TensorFlow lacks one."""
    try:
        from tensorflow.python import pywrap_tfe
        from tensorflow.python.eager import context
        from tensorflow.python.eager import core
        from tensorflow.python.framework import ops
        if not hasattr(context, "_context"):  # the wrappers' way to the eager context
            return None

        def eager_context():
            return context._context or context.context()

        return (pywrap_tfe.TFE_Py_FastPathExecute, eager_context, core._NotOkStatusException,
                core._FallbackException, ops.raise_from_not_ok_status)
    except (ImportError, AttributeError):
        return None


def in_xla_context(graph):
    """True while `graph` (or a graph it is nested in) is traced for XLA."""
    from tensorflow.python.ops import control_flow_util
    return control_flow_util.GraphOrParentsInXlaContext(graph)


def keep_autograph_out_of(package):
    """Makes autograph call `package`'s functions and methods as they are inside a traced
    function, as it calls TensorFlow's and Keras's (their graph code needs no conversion).
    False, changing nothing, where this TensorFlow has no such rules."""
    try:
        from tensorflow.python.autograph.core import config
        rules, rule = tuple(config.CONVERSION_RULES), config.DoNotConvert(package)
    except (ImportError, AttributeError):
        return False
    if not any(isinstance(r, config.DoNotConvert) and r.matches(package) for r in rules):
        config.CONVERSION_RULES = (rule,) + rules
    return True


def add_order_insensitive_ops(op_types):
    """Adds `op_types` to the stateful ops tf.function may leave unordered. False, changing
    nothing, where this TensorFlow has no such list."""
    try:
        from tensorflow.python.framework import auto_control_deps
        current = auto_control_deps.MUST_RUN_ORDER_INSENSITIVE_STATEFUL_OPS
    except (ImportError, AttributeError):
        return False
    auto_control_deps.MUST_RUN_ORDER_INSENSITIVE_STATEFUL_OPS = frozenset(current) | frozenset(
        op_types)
    return True


def save_spec(tensor, slice_spec, name, dtype=None, device=None):
    """TensorFlow's SaveSpec (a value a checkpoint writes; `tensor` may be a callable that
    computes it when the checkpoint is written)."""
    from tensorflow.python.training.saving import saveable_object
    return saveable_object.SaveSpec(tensor, slice_spec, name, dtype=dtype, device=device)


# The base class of what a checkpoint saves, and its wrapper of lists and dicts into
# trackable ones (listed in HOOKS with the protocol's methods).
Trackable = tf.__internal__.tracking.Trackable


def wrap_trackable(value):
    """A list or dict as a checkpoint tracks it (what attribute assignment does in a
    tf.Module)."""
    return tf.__internal__.tracking.wrap(value)


def trackable_children(obj, save_type="checkpoint", **kwargs):
    """What a checkpoint saves under `obj`: {name: child}."""
    return obj._trackable_children(save_type, **kwargs)


def class_trackable_children(obj):
    """`obj`'s children as its class defines them, whatever was set on the object itself."""
    return type(obj)._trackable_children(obj)


def set_trackable_children(obj, children):
    """Makes children(save_type="checkpoint", **kwargs) what a checkpoint saves under `obj`."""
    obj._trackable_children = children


class ChildrenHook:
    """A mixin (first among the bases) whose checkpoint children are what the class's
    checkpoint_children(parent_children, save_type, **kwargs) returns; parent_children()
    gives what the next base would have saved."""

    def _trackable_children(self, save_type="checkpoint", **kwargs):
        parent = super()._trackable_children
        return self.checkpoint_children(lambda: parent(save_type, **kwargs), save_type,
                                        **kwargs)


class CheckpointLeaf(Trackable):
    """A checkpoint leaf whose saved tensors are tensors_to_save() ({key: SaveSpec or
    tensor}) and whose restore is restore_tensors({key: tensor})."""

    def _serialize_to_tensors(self):
        return self.tensors_to_save()

    def _restore_from_tensors(self, restored_tensors):
        return self.restore_tensors(restored_tensors)


class GivenChildren(Trackable):
    """A checkpoint object whose children are given: {name: child}."""

    def __init__(self, children):
        self._given_children = children

    def _trackable_children(self, save_type="checkpoint", **kwargs):
        return dict(self._given_children)


def create_tf1_slots(optimizer, variables):
    """Makes a tf.compat.v1.train.Optimizer's slots for `variables` now (outside a
    tf.cond, where TF1 would make them inside apply_gradients)."""
    optimizer._create_slots(variables)


# What eager ops return (TF keeps the class private; `type(tf.constant(0))` would be a graph
# tensor's class where a TF1 script disabled eager execution before importing tfring), and
# its dtype as TensorFlow's enum, without a Python frame (the eager hot path).
EagerTensor = _eager_tensor_class()
eager_dtype_enum = EagerTensor._datatype_enum

