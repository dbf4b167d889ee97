"""shard_optimizer_state=True on tf_keras's legacy optimizers (tf_keras.optimizers.legacy,
which keep their slots per variable, made by add_slot): training equals unsharded training,
each rank holds its block of the state, and TensorFlow checkpoints and HDF5 files hold the
whole state as the unsharded optimizer does (its slots as slots of the model's variables).

The suite runs this file with TF_USE_LEGACY_KERAS=1 at 2 and 3 ranks; in the Keras 3 runs
it is skipped.
"""

import os

import numpy as np
import pytest
import tensorflow as tf

if not os.environ.get("TF_USE_LEGACY_KERAS") or "tf_keras" not in tf.keras.__name__:
    pytest.skip("tf_keras tests run with TF_USE_LEGACY_KERAS=1 (a stage of their own)",
                allow_module_level=True)

import tfring  # noqa: E402
import tfring.keras as hvd  # noqa: E402

from _sharded_util import BATCH, _assert_same_on_every_rank, _data, _flat, \
    build_optimizer, check_apply_equals_unsharded, check_fp16_compression, \
    check_loss_scale_skips_on_every_rank, tf_keras_apply  # noqa: E402
import _sharded_util  # noqa: E402

keras = tf.keras
legacy = keras.optimizers.legacy

OPTIMIZERS = {
    "sgd-momentum": lambda: legacy.SGD(0.1, momentum=0.9),
    "adam": lambda: legacy.Adam(0.01),
    "rmsprop": lambda: legacy.RMSprop(0.01),
    # Norms small enough that every step clips: a block's own norm would clip otherwise.
    "adam-clipnorm": lambda: legacy.Adam(0.05, clipnorm=0.01),
    "adam-global-clipnorm": lambda: legacy.Adam(0.05, global_clipnorm=0.01),
    "adam-clipvalue": lambda: legacy.Adam(0.05, clipvalue=0.001),
}


def _fit(make, sharded, callbacks=(), **options):
    model = _sharded_util._model(keras)
    model.compile(optimizer=hvd.DistributedOptimizer(make(), shard_optimizer_state=sharded,
                                                     **options), loss="mse")
    x, y = _data(tfring.rank())
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
              callbacks=list(callbacks))
    return model


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_apply_equals_the_plain_optimizer_on_averaged_gradients(name):
    # apply_gradients of the hooked optimizer, a few steps in a tf.function, against the
    # same legacy optimizer without tfring given the average of every rank's gradients.
    check_apply_equals_unsharded(OPTIMIZERS[name], keras, tf_keras_apply)


def test_fit_equals_unsharded_fit():
    """The one fit-based comparison on tf_keras's legacy optimizers: model.fit's train
    step (apply_gradients, _create_all_weights building the blocks), sharded against
    unsharded; the same on every rank after every batch, each rank holding its block."""
    _sharded_util._compare(OPTIMIZERS["adam"], k=keras)


def test_accumulation_counts_every_pass_as_horovod():
    # backward_passes_per_step=2, six passes: three updates by the sums of two passes'
    # averaged gradients (SGD with momentum, whose update does not depend on the step
    # count), and `iterations` counts every pass, as Horovod's.
    sharded, _, _ = check_apply_equals_unsharded(OPTIMIZERS["sgd-momentum"], keras,
                                                 tf_keras_apply, steps=6, passes=2)
    assert int(sharded.iterations.numpy()) == 6


def test_fp16_compression_sends_float16_and_rounds_as_unsharded():
    check_fp16_compression(keras, lambda: legacy.SGD(1.0), tf_keras_apply, build_optimizer)


def test_mixed_precision_equals_unsharded_and_skips_on_every_rank(rank):
    # A LossScaleOptimizer's apply_gradients (unscaled gradients, finite: applied) against
    # the plain one's on the averaged gradients.
    check_apply_equals_unsharded(
        lambda: keras.mixed_precision.LossScaleOptimizer(legacy.Adam(0.01)), keras,
        tf_keras_apply)
    # An inf in one rank's block: every rank skips the step and halves the scale.
    check_loss_scale_skips_on_every_rank(
        rank, keras,
        lambda sgd: keras.mixed_precision.LossScaleOptimizer(sgd, initial_scale=4.0),
        tf_keras_apply, lambda opt: opt.loss_scale.numpy(), 0.1, sgd=legacy.SGD(0.1))


def _checkpoint_state(path):
    return {k: tf.train.load_variable(path, k) for k, _ in tf.train.list_variables(path)
            if "OPTIMIZER_SLOT" in k or "/optimizer/" in k}


def test_checkpoints_hold_the_whole_state_and_resume(shared_tmp_path):
    root = shared_tmp_path
    make = OPTIMIZERS["adam"]
    sharded = _fit(make, True, [hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    unsharded = _fit(make, False)
    if tfring.rank() == 0:  # gathered at the epoch's end by tfring's callback
        tf.train.Checkpoint(model=sharded).write(f"{root}/sharded")
        tf.train.Checkpoint(model=unsharded).write(f"{root}/unsharded")
        got, want = _checkpoint_state(f"{root}/sharded"), _checkpoint_state(f"{root}/unsharded")
        # The slots of each model variable (Adam's m and v of 6 variables), the counter
        # and the hyperparameters, under the same keys.
        assert sorted(got) == sorted(want) and len(want) >= 12, (sorted(got), sorted(want))
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-7,
                                       err_msg=key)
        sharded.save(f"{root}/sharded.h5")  # HDF5: the optimizer's weights, whole
        plain = keras.models.load_model(f"{root}/sharded.h5")
        got_vs, want_vs = plain.optimizer.variables(), unsharded.optimizer.variables()
        # zip stops at the shorter: the same count first (the counter, Adam's m and v).
        assert len(got_vs) == len(want_vs) > 12, (len(got_vs), len(want_vs))
        for got_v, want_v in zip(got_vs, want_vs):
            np.testing.assert_allclose(got_v.numpy(), want_v.numpy(), rtol=1e-5, atol=1e-7)
    tfring.barrier()
    finals = []
    for shard, name in ((True, "unsharded"), (False, "sharded"), (True, "sharded")):
        model = _sharded_util._model(keras)
        model.compile(optimizer=hvd.DistributedOptimizer(make(), shard_optimizer_state=shard),
                      loss="mse")
        model.optimizer._create_all_weights(model.trainable_variables)
        tf.train.Checkpoint(model=model).read(f"{root}/{name}").assert_existing_objects_matched()
        assert int(model.optimizer.iterations.numpy()) == int(
            unsharded.optimizer.iterations.numpy())
        x, y = _data(tfring.rank())
        model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
        finals.append(_flat(model.get_weights()))
    # Each continues as the unsharded run does: Adam's restored moments shape the steps.
    x, y = _data(tfring.rank())
    unsharded.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    for final in finals:
        np.testing.assert_allclose(final, _flat(unsharded.get_weights()), rtol=1e-5, atol=1e-6)
    _assert_same_on_every_rank(finals[0])


def test_keras_files_round_trip_as_unsharded(shared_tmp_path):
    """Legacy optimizers keep no state in .keras files, unsharded or sharded: rank 0 saves
    alone (a save that gathered would meet the others' barrier, a different collective, and
    fail there), and every rank loads the weights back."""
    model = _fit(OPTIMIZERS["adam"], True)
    path = f"{shared_tmp_path}/model.keras"
    if tfring.rank() == 0:
        model.save(path)
    tfring.barrier()
    again = _sharded_util._model(keras)
    again.compile(optimizer=hvd.DistributedOptimizer(legacy.Adam(0.01),
                                                     shard_optimizer_state=True), loss="mse")
    again.load_weights(path)
    np.testing.assert_array_equal(_flat(again.get_weights()), _flat(model.get_weights()))
