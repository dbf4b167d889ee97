"""Checkpoints of shard_optimizer_state=True (Keras 3): Keras's files and tf.train.Checkpoint
hold the whole optimizer state, gathered, as the unsharded optimizer holds it, so that they
resume sharded or not, at any number of ranks (tests/jobs/test_sharded_resume.py: 2 to 3
and 3 to 2), and with a plain Keras optimizer (without tfring's wrapper)."""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfring
import tfring.keras as tk

from _sharded_util import BATCH, _assert_same_on_every_rank, _data, _fit, _flat, _model


def _optimizer_state(path):
    """{dataset path: array} of the optimizer's part of a Keras weights file."""
    import h5py
    out = {}
    with h5py.File(path, "r") as f:
        f["optimizer"].visititems(
            lambda name, item: out.__setitem__(name, item[()]) if hasattr(item, "shape")
            else None)
    return out


def _fit_with_checkpoint(sharded, path, epochs=1, model=None):
    """fit() with tfring's broadcast callback on every rank and a ModelCheckpoint on rank 0
    listed after it, as Horovod's examples write it."""
    if model is None:
        model = _model()
        model.compile(optimizer=tk.DistributedOptimizer(
            keras.optimizers.Adam(0.01), shard_optimizer_state=sharded), loss="mse")
    callbacks = [tk.callbacks.BroadcastGlobalVariablesCallback(0)]
    if tfring.rank() == 0 and path:
        callbacks.append(keras.callbacks.ModelCheckpoint(path, save_weights_only=True))
    x, y = _data(tfring.rank())
    model.fit(x, y, batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0,
              callbacks=callbacks)
    return model


def test_checkpoints_hold_the_whole_state_as_unsharded_and_resume(shared_tmp_path):
    root = shared_tmp_path
    sharded_file, plain_file = f"{root}/sharded.weights.h5", f"{root}/plain.weights.h5"
    trained = _fit_with_checkpoint(True, sharded_file)
    if tfring.rank() == 0:  # gathered at the epoch's end: a whole model too
        trained.save(f"{root}/sharded.keras")
    _fit_with_checkpoint(False, plain_file)
    tfring.barrier()
    if tfring.rank() == 0:  # the same variables, the same (whole) values
        sharded, plain = _optimizer_state(sharded_file), _optimizer_state(plain_file)
        assert sorted(sharded) == sorted(plain) and len(plain) > 6
        for key in plain:
            np.testing.assert_allclose(sharded[key], plain[key], rtol=1e-5, atol=1e-7,
                                       err_msg=key)
    # Resume from the unsharded file (any number of ranks writes that layout), sharded and
    # not: one more epoch each, the same weights.
    resumed = {}
    for sharded in (True, False):
        model = _model()
        model.compile(optimizer=tk.DistributedOptimizer(
            keras.optimizers.Adam(0.01), shard_optimizer_state=sharded), loss="mse")
        model.optimizer.build(model.trainable_variables)
        model.load_weights(plain_file)
        resumed[sharded] = _flat(_fit_with_checkpoint(sharded, None, model=model).get_weights())
    np.testing.assert_allclose(resumed[True], resumed[False], rtol=1e-5, atol=1e-6)
    _assert_same_on_every_rank(resumed[True])
    # tfring.keras.load_model on every rank: sharded again, each rank its blocks.
    model = tk.load_model(f"{root}/sharded.keras")
    assert model.optimizer.get_config()["shard_optimizer_state"]
    loaded = _flat(_fit_with_checkpoint(True, None, model=model).get_weights())
    np.testing.assert_allclose(loaded, resumed[False], rtol=1e-5, atol=1e-6)
    # Rank 0 alone loads (as Horovod's examples resume); the broadcast callback gives every
    # rank its block of rank 0's state.
    model = _model()
    model.compile(optimizer=tk.DistributedOptimizer(
        keras.optimizers.Adam(0.01), shard_optimizer_state=True), loss="mse")
    model.optimizer.build(model.trainable_variables)
    if tfring.rank() == 0:
        model.load_weights(plain_file)
    alone = _flat(_fit_with_checkpoint(True, None, model=model).get_weights())
    np.testing.assert_allclose(alone, resumed[False], rtol=1e-5, atol=1e-6)


def test_a_save_needs_the_state_gathered_at_this_step(tmp_path):
    model = _fit(lambda: keras.optimizers.Adam(0.01), True)  # no tfring callback: no gather
    with pytest.raises(RuntimeError, match="was not gathered"):
        model.save_weights(str(tmp_path / "w.weights.h5"))
    model.optimizer.gather_state()
    if tfring.rank() == 0:
        model.save_weights(str(tmp_path / "w.weights.h5"))
    else:
        with pytest.raises(RuntimeError, match="save on rank 0"):
            model.save_weights(str(tmp_path / "w.weights.h5"))
    x, y = _data(tfring.rank())
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)
    if tfring.rank() == 0:
        with pytest.raises(RuntimeError, match="gather it again"):
            model.save_weights(str(tmp_path / "w.weights.h5"))
    # tf.train.Checkpoint likewise (TensorFlow wraps the error; the text is ours).
    if tfring.rank() == 0:
        with pytest.raises(Exception, match="gather it again"):
            tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))


def _plain_adam_model():
    """The model with a plain Keras Adam, built: what a script without tfring resumes into."""
    model = _model()
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    model.optimizer.build(model.trainable_variables)
    return model


def _inner_values(model):
    return [v.numpy() for v in model.optimizer.inner_optimizer.variables]


def _assert_state(values, want):
    assert len(values) == len(want)
    for got, expected in zip(values, want):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)


def _tfring_adam_model(sharded):
    model = _model()
    model.compile(optimizer=tk.DistributedOptimizer(
        keras.optimizers.Adam(0.01), shard_optimizer_state=sharded), loss="mse")
    model.optimizer.build(model.trainable_variables)
    return model


def test_keras_files_load_into_a_plain_optimizer_and_back(shared_tmp_path):
    root = shared_tmp_path
    path, plain_path = f"{root}/sharded.weights.h5", f"{root}/plain.weights.h5"
    trained = _fit_with_checkpoint(True, path)
    unsharded = _inner_values(_fit_with_checkpoint(False, None))
    tfring.barrier()
    if tfring.rank() == 0:
        plain = _plain_adam_model()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # Keras warns when it skips the optimizer
            plain.load_weights(path)
        _assert_state([v.numpy() for v in plain.optimizer.variables], unsharded)
        np.testing.assert_array_equal(_flat(plain.get_weights()), _flat(trained.get_weights()))
        plain.save_weights(plain_path)  # written by Keras alone
    tfring.barrier()
    for sharded in (True, False):  # and back into tfring's wrapper, on every rank
        model = _tfring_adam_model(sharded)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            model.load_weights(plain_path)
        model.optimizer.gather_state()
        if tfring.rank() == 0:
            got = (model.optimizer._sharded.values_to_save() if sharded
                   else _inner_values(model))
            _assert_state(got, unsharded)


def _checkpoint_state(path):
    """{key: value} of a TensorFlow checkpoint's optimizer variables."""
    return {k: tf.train.load_variable(path, k) for k, _ in tf.train.list_variables(path)
            if "/optimizer/" in k}


@pytest.mark.parametrize("loss_scale", [False, True], ids=["adam", "loss-scale-adam"])
def test_tf_train_checkpoint_holds_the_whole_state_and_restores_anywhere(shared_tmp_path,
                                                                        loss_scale):
    root = shared_tmp_path

    def make():
        adam = keras.optimizers.Adam(0.01)
        return keras.optimizers.LossScaleOptimizer(adam) if loss_scale else adam

    sharded = _fit(make, True)
    unsharded = _fit(make, False)
    sharded.optimizer.gather_state()
    if tfring.rank() == 0:
        tf.train.Checkpoint(model=sharded).write(f"{root}/sharded")
        tf.train.Checkpoint(model=unsharded).write(f"{root}/unsharded")
        plain = _model()
        plain.compile(optimizer=make(), loss="mse")
        plain.optimizer.build(plain.trainable_variables)
        tf.train.Checkpoint(model=plain).write(f"{root}/plain")
        # The same keys as a plain Keras optimizer's checkpoint, and the unsharded values.
        got, want = _checkpoint_state(f"{root}/sharded"), _checkpoint_state(f"{root}/unsharded")
        assert sorted(got) == sorted(want) == sorted(_checkpoint_state(f"{root}/plain"))
        assert len(want) > 6, sorted(want)
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-7,
                                       err_msg=key)
        # Without tfring: a plain optimizer restores every variable of it.
        status = tf.train.Checkpoint(model=plain).read(f"{root}/sharded")
        status.assert_existing_objects_matched()
        want_values = [v.numpy() for v in unsharded.optimizer.variables]
        if not loss_scale:
            want_values = want_values[len(unsharded.optimizer._variables):]
        _assert_state([v.numpy() for v in plain.optimizer.variables], want_values)
    tfring.barrier()
    # Every rank restores, sharded and not, from either file: one more epoch ends alike.
    finals = []
    for shard, name in ((True, "unsharded"), (False, "sharded"), (True, "sharded")):
        model = _model()
        model.compile(optimizer=tk.DistributedOptimizer(make(), shard_optimizer_state=shard),
                      loss="mse")
        model.optimizer.build(model.trainable_variables)
        tf.train.Checkpoint(model=model).read(f"{root}/{name}").assert_existing_objects_matched()
        x, y = _data(tfring.rank())
        model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
        finals.append(_flat(model.get_weights()))
    for final in finals[1:]:
        np.testing.assert_allclose(final, finals[0], rtol=1e-5, atol=1e-6)
    _assert_same_on_every_rank(finals[0])


def test_tf_train_checkpoint_needs_the_optimizer_built(tmp_path):
    model = _model()
    model.compile(optimizer=tk.DistributedOptimizer(
        keras.optimizers.Adam(0.01), shard_optimizer_state=True), loss="mse")
    path = tf.train.Checkpoint(model=_plain_adam_model()).write(str(tmp_path / "state"))
    with pytest.raises(ValueError, match="build the optimizer before"):
        tf.train.Checkpoint(model=model).read(path)
    with pytest.raises(ValueError, match="build the optimizer before"):
        tf.train.Checkpoint(model=model).write(str(tmp_path / "again"))
