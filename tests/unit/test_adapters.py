"""The adapters that hold every private Keras/tf_keras/TensorFlow name tfring uses
(tfring/_adapters): each hook is still there in the installed releases (a release that drops
one fails here, naming itself and the hook, before a training test fails for it), no module
outside the adapters imports a framework's private modules, and the hooks that decide
numbers decide as Keras does."""

import importlib.metadata
import io
import os
import re
import tokenize

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfring._adapters import keras3, tf_internals, tf_keras

TFRING = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tfring")
# Private modules and namespaces of the frameworks (only the adapters may spell them).
PRIVATE_MODULES = re.compile(r"keras\.src\b|tf_keras\.src\b|tensorflow\.python\b|"
                             r"tf\.__internal__\b")


# The frameworks' private attributes that the adapters reach (their HOOKS), as an attribute
# (`.name`) or a string (getattr(obj, "name")) outside them would spell them. Names as
# general as tfring's own (`_variables`, `_name`) are left to review.
PRIVATE_ATTRIBUTES = frozenset((
    "_use_weight_decay", "_is_excluded_from_weight_decay", "_var_key",
    "_exclude_from_weight_decay", "_exclude_from_weight_decay_cache", "_clip_gradients",
    "_clipnorm_fn", "_global_clipnorm_fn", "_built", "_hyper", "_learning_rate",
    "_supports_tf_logs", "_moments", "_reduction_axes", "_calculate_mean_and_var",
    "_trainable_variables", "_aggregate_gradients", "_compute_gradients",
    "_create_all_weights", "_create_or_restore_slot_variable", "_loss_scale",
    "_trackable_children", "_serialize_to_tensors", "_restore_from_tensors", "_create_slots",
    "_datatype_enum", "model_supports_jit"))


def _library_sources():
    for folder, _, files in os.walk(TFRING):
        if os.path.basename(folder) != "_adapters":
            for name in sorted(files):
                if name.endswith(".py"):
                    yield os.path.join(folder, name)


def _version(distribution):
    for name in (distribution, distribution.replace("keras", "keras-nightly")):
        try:
            return f"{name} {importlib.metadata.version(name)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return distribution


@pytest.mark.parametrize("adapter,distribution", [
    (keras3, "keras"), (tf_internals, "tensorflow-cpu"), (tf_keras, "tf_keras")],
    ids=["keras3", "tf_internals", "tf_keras"])
def test_every_hook_is_there_in_the_installed_release(adapter, distribution):
    if adapter is tf_keras:
        pytest.importorskip("tf_keras")
    assert adapter.HOOKS
    missing = [f"  {hook.name}: {problem}\n    (tfring uses it for: {hook.purpose}; the public "
               f"API it waits for: {hook.waits_for})"
               for hook in adapter.HOOKS for problem in [hook.probe()] if problem]
    assert not missing, (f"{_version(distribution)} lacks what tfring's "
                         f"{adapter.__name__} relies on:\n" + "\n".join(missing))


def test_no_module_outside_the_adapters_reaches_into_a_frameworks_private_modules():
    found = []
    for path in _library_sources():
        with open(path) as f:
            for number, line in enumerate(f, 1):
                if PRIVATE_MODULES.search(line):
                    found.append(f"{os.path.relpath(path, TFRING)}:{number}: {line.strip()}")
    assert not found, "private framework modules used outside tfring/_adapters:\n" + \
        "\n".join(found)


def test_no_module_outside_the_adapters_spells_a_frameworks_private_attribute():
    found = []
    for path in _library_sources():
        with open(path) as f:
            tokens = list(tokenize.generate_tokens(io.StringIO(f.read()).readline))
        for before, token in zip(tokens, tokens[1:]):
            attribute = token.type == tokenize.NAME and before.string == "."
            as_string = token.type == tokenize.STRING and token.string[1:-1] in PRIVATE_ATTRIBUTES
            if (attribute and token.string in PRIVATE_ATTRIBUTES) or as_string:
                found.append(f"{os.path.relpath(path, TFRING)}:{token.start[0]}: {token.line.strip()}")
    assert not found, "private framework attributes used outside tfring/_adapters:\n" + \
        "\n".join(found)


def test_weight_decay_is_decided_from_the_settings_before_the_optimizer_is_built():
    # As Keras decides it once built (3.16 refuses to be asked before): by variable and by
    # name, for variables the optimizer is never built on (the model's, when the state is
    # sharded over tfring's blocks).
    dense, bias, other = (keras.Variable(np.zeros(2, np.float32), name=n)
                          for n in ("dense_kernel", "dense_bias", "other"))
    optimizer = keras.optimizers.AdamW(weight_decay=0.1)
    optimizer.exclude_from_weight_decay(var_list=[other], var_names=["bias"])
    assert [keras3.uses_weight_decay(optimizer, v) for v in (dense, bias, other)] == \
        [True, False, False]
    block = keras.Variable(np.zeros(3, np.float32), name="tfring_block1")
    keras3.exclude_from_weight_decay(optimizer, [block])
    assert not keras3.uses_weight_decay(optimizer, block)
    # What the user excluded stays excluded, and the optimizer built on the block agrees.
    assert [keras3.uses_weight_decay(optimizer, v) for v in (dense, bias, other)] == \
        [True, False, False]
    kept = keras.Variable(np.zeros(3, np.float32), name="tfring_block0")
    optimizer.build([kept, block])
    assert keras3.uses_weight_decay(optimizer, kept)
    assert not keras3.uses_weight_decay(optimizer, block)


def test_clipping_is_replaced_and_the_optimizers_own_stays_for_what_is_left():
    optimizer = keras.optimizers.SGD(clipvalue=0.5)
    grads = [np.array([2.0, -2.0], np.float32)]
    assert keras3.replace_gradient_clipping(optimizer, lambda g: None)  # clipvalue's turn
    np.testing.assert_array_equal(np.asarray(optimizer._clip_gradients(grads)[0]), [0.5, -0.5])
    assert keras3.replace_gradient_clipping(optimizer, lambda g: [x * 0 for x in g])
    np.testing.assert_array_equal(np.asarray(optimizer._clip_gradients(grads)[0]), [0.0, 0.0])


def test_own_variables_leave_out_a_wrapped_optimizers():
    inner = keras.optimizers.SGD(0.1)
    wrapper = keras.optimizers.LossScaleOptimizer(inner)
    wrapper.build([keras.Variable(np.zeros(2, np.float32))])
    own = keras3.own_variables(wrapper)
    assert own and not any(v is w for v in own for w in inner.variables)
    assert len(wrapper.variables) == len(own) + len(inner.variables)


def test_sync_batch_norm_is_refused_where_keras_has_no_moments(monkeypatch):
    # Keras 3.0's BatchNormalization computes its statistics without _moments: tfring's
    # layer would silently keep each rank's own, so it refuses to be made there.
    monkeypatch.delattr(keras.layers.BatchNormalization, "_moments")
    layer = keras3.batch_norm_with_moments(lambda inputs, axes, mask: None)
    with pytest.raises(RuntimeError, match=r"needs Keras 3\.1 or newer"):
        layer()


def test_autograph_converts_the_users_code_and_calls_tfrings_as_it_is():
    # tfring's Python builds graphs as TensorFlow's does: autograph calls it as it is (its
    # conversion was 1.6 s of a first trace with three collectives). The user's own code
    # around it is still converted: the `if` on a tensor below becomes a tf.cond.
    from tensorflow.python.autograph.impl import conversion

    import tfring
    import tfring.keras
    for entry in (tfring.allreduce, tfring.broadcast_variables, tfring.Compression.fp16.compress,
                  tfring.DistributedGradientTape.gradient, tfring.keras.DistributedOptimizer):
        assert conversion.is_allowlisted(entry), entry

    def users_step(x):
        if tf.reduce_sum(x) > 0:
            x = tfring.allreduce(x, op=tfring.Sum, name="autograph_users_step")
        return x * 2

    assert not conversion.is_allowlisted(users_step)
    tfring.init()
    step = tf.function(users_step)
    np.testing.assert_array_equal(step(tf.constant([1.0, 2.0])).numpy(), [2.0, 4.0])
    np.testing.assert_array_equal(step(tf.constant([-1.0, -2.0])).numpy(), [-2.0, -4.0])
    graph = step.get_concrete_function(tf.TensorSpec([2], tf.float32)).graph
    assert any(op.type in ("If", "StatelessIf") for op in graph.get_operations())
