"""TensorFlow's private names that tfring uses (tfring/_adapters/__init__.py says why here).

Each is reached lazily or behind a guard, so that a release that moves one costs the
feature that needs it (with the probe's unit test failing), never `import tfring`.

Listed but still spelled where they are used: the checkpoint protocol of
`tf.__internal__.tracking.Trackable` (`_trackable_children`, `_serialize_to_tensors`,
`_restore_from_tensors`), which tfring's optimizer wrappers and sharded checkpoints
override as subclasses (tfring/keras/optimizer.py, _sharded_tf_checkpoint.py,
_tf_keras_sharded.py), and `tf.compat.v1.train.Optimizer._create_slots`
(tfring/optimizer_v1.py). Their probes below fail the unit test when a release drops one.
"""

import tensorflow as tf

from tfring._adapters._hooks import Hook, has_attributes


def _import(module):
    import importlib
    return importlib.import_module(module)


HOOKS = (
    Hook("tensorflow.python.pywrap_tfe.TFE_Py_FastPathExecute, eager.context._context, "
         "eager.core._NotOkStatusException/_FallbackException, "
         "framework.ops.raise_from_not_ok_status",
         "a small eager allreduce through TensorFlow's own fast path, as its generated op "
         "wrappers call it (tfring/_eager_call.py; without it, the generated wrapper)",
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
    Hook("EagerTensor._datatype_enum", "an eager tensor's dtype on the eager call's hot path",
         "tensor.dtype.as_datatype_enum (slower)",
         has_attributes(lambda: tf.constant(0.0), "_datatype_enum")),
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
