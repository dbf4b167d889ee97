"""tfring.keras.DistributedOptimizer(shard_optimizer_state=True) on Keras 3: training equals
unsharded training, every rank ends each step with the same weights, each rank holds its
block of the optimizer state only, and what the mode cannot do is refused, saying why.

The model's variables (42 + 7 + 35 + 5 + 5 + 1 = 95 elements) do not divide into the ranks'
blocks at 2 or 3 ranks, so blocks split variables."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfring
import tfring.keras as tk

STEPS, BATCH = 3, 4
TOTAL = 95


def _model():
    keras.utils.set_random_seed(3)
    x = keras.Input((6,))
    h = keras.layers.Dense(7, activation="tanh")(x)
    h = keras.layers.Dense(5, activation="tanh")(h)
    return keras.Model(x, keras.layers.Dense(1)(h))


def _data(rank):
    rng = np.random.default_rng(10 + rank)  # each rank its own data
    n = STEPS * BATCH
    return (rng.normal(size=(n, 6)).astype(np.float32),
            rng.normal(size=(n, 1)).astype(np.float32))


def _fit(make_optimizer, sharded, callbacks=(), **options):
    model = _model()
    optimizer = tk.DistributedOptimizer(make_optimizer(), shard_optimizer_state=sharded,
                                        **options)
    model.compile(optimizer=optimizer, loss="mse")
    x, y = _data(tfring.rank())
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
              callbacks=list(callbacks))
    return model


def _flat(weights):
    return np.concatenate([np.ravel(w) for w in weights])


def _assert_same_on_every_rank(flat):
    gathered = tfring.allgather(tf.constant(flat[None])).numpy()
    for r in range(1, len(gathered)):
        np.testing.assert_array_equal(gathered[r], gathered[0], err_msg=f"rank {r} differs")


def _compare(make_optimizer, rtol=1e-5, atol=1e-6, **options):
    initial = _flat(_model().get_weights())
    plain = _flat(_fit(make_optimizer, False, **options).get_weights())
    sharded = _flat(_fit(make_optimizer, True, **options).get_weights())
    assert np.abs(plain - initial).max() > 1e-3, "training did not move the weights"
    np.testing.assert_allclose(sharded, plain, rtol=rtol, atol=atol)
    _assert_same_on_every_rank(sharded)


def _adamw():
    opt = keras.optimizers.AdamW(0.01, weight_decay=0.2)
    opt.exclude_from_weight_decay(var_names=["bias"])  # two groups: with decay, without
    return opt


@pytest.mark.parametrize("make_optimizer", [
    lambda: keras.optimizers.SGD(0.1, momentum=0.9),
    lambda: keras.optimizers.Adam(0.01),
    _adamw,
    lambda: keras.optimizers.RMSprop(0.01),
], ids=["sgd-momentum", "adam", "adamw-bias-excluded", "rmsprop"])
def test_equals_unsharded(make_optimizer):
    _compare(make_optimizer)


@pytest.mark.parametrize("make_optimizer", [
    lambda: keras.optimizers.Adam(0.01, global_clipnorm=0.05),
    lambda: keras.optimizers.SGD(0.1, clipnorm=0.02),
    lambda: keras.optimizers.SGD(0.1, clipvalue=0.005),
], ids=["global-clipnorm", "clipnorm", "clipvalue"])
def test_clipping_uses_whole_norms(make_optimizer):
    # Norms small enough that every step clips: a norm of this rank's block alone would
    # scale differently.
    _compare(make_optimizer)


def test_jit_compile_runs_the_step_without_xla_and_says_so():
    # The step leaves XLA (allgather has no lowering yet): the result is unsharded's.
    with pytest.warns(UserWarning, match="allgather, which has no XLA lowering"):
        model = _model()
        model.compile(optimizer=tk.DistributedOptimizer(
            keras.optimizers.Adam(0.01), shard_optimizer_state=True), loss="mse",
            jit_compile=True)
    assert not model.jit_compile
    x, y = _data(tfring.rank())
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    plain = _fit(lambda: keras.optimizers.Adam(0.01), False)
    np.testing.assert_allclose(_flat(model.get_weights()), _flat(plain.get_weights()),
                               rtol=1e-5, atol=1e-6)


def test_accumulation_and_fp16_compression():
    _compare(lambda: keras.optimizers.Adam(0.01), backward_passes_per_step=3)
    _compare(lambda: keras.optimizers.SGD(0.1, momentum=0.9), rtol=1e-3, atol=1e-4,
             compression=tfring.Compression.fp16)


def test_mixed_precision_loss_scale():
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        _compare(lambda: keras.optimizers.LossScaleOptimizer(
            keras.optimizers.SGD(0.1, momentum=0.9), initial_scale=2.0 ** 10),
            rtol=1e-3, atol=1e-4)
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_loss_scale_skips_on_every_rank_when_one_block_is_not_finite(rank):
    # An inf in rank 0's gradient of the last weight lands in the last rank's block alone;
    # every rank must skip the step and halve the scale, as unsharded every rank would.
    model = _model()
    variables = model.trainable_variables
    optimizer = tk.DistributedOptimizer(keras.optimizers.LossScaleOptimizer(
        keras.optimizers.SGD(0.1), initial_scale=4.0), shard_optimizer_state=True)
    grads = [tf.ones_like(v) for v in variables]
    if rank == 0:
        grads[-1] = tf.fill(tf.shape(grads[-1]), np.inf)
    before = _flat(model.get_weights())
    optimizer.apply(grads, variables)
    np.testing.assert_array_equal(_flat(model.get_weights()), before)
    assert float(optimizer.dynamic_scale.numpy()) == 2.0
    optimizer.apply([tf.ones_like(v) for v in variables], variables)  # finite: applied
    after = _flat(model.get_weights())
    np.testing.assert_allclose(after, before - 0.1 / 2.0, rtol=1e-6)
    _assert_same_on_every_rank(after)


def test_weights_equal_after_every_step_and_state_is_a_block(rank, size):
    steps = []
    record = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: steps.append(_flat(model_ref[0].get_weights())))
    model_ref = []

    def make():
        return keras.optimizers.Adam(0.01)

    class Keep(keras.callbacks.Callback):
        def set_model(self, model):
            model_ref.append(model)

    model = _fit(make, True, callbacks=[Keep(), record])
    assert len(steps) == STEPS
    for flat in steps:
        _assert_same_on_every_rank(flat)
    # Adam's two moments, of this rank's block only (the scalar counters aside).
    state = [v for v in model.optimizer.variables if int(np.prod(v.shape)) > 1]
    mine = sum(int(np.prod(v.shape)) for v in state)
    block = TOTAL // size + (1 if rank < TOTAL % size else 0)
    assert mine == 2 * block, [v.shape for v in state]
    total = tfring.allreduce(tf.constant(mine), op=tfring.Sum).numpy()
    assert total == 2 * TOTAL


def test_refusals_say_why():
    sgd = keras.optimizers.SGD(0.1)
    with pytest.raises(ValueError, match="Adasum combines whole gradients"):
        tk.DistributedOptimizer(sgd, shard_optimizer_state=True, op=tfring.Adasum)
    with pytest.raises(ValueError, match="process set"):
        tk.DistributedOptimizer(sgd, shard_optimizer_state=True,
                                process_set=tfring.ProcessSet([0]))
    with pytest.raises(ValueError, match="groups"):
        tk.DistributedOptimizer(sgd, shard_optimizer_state=True, groups=2)
    opt = tk.DistributedOptimizer(sgd, shard_optimizer_state=True)
    with pytest.raises(ValueError, match="cannot keep a variable local"):
        opt.register_local_var(keras.Variable(1.0))
    ema = keras.optimizers.SGD(0.1, use_ema=True)
    model = _model()
    model.compile(optimizer=tk.DistributedOptimizer(ema, shard_optimizer_state=True),
                  loss="mse")
    x, y = _data(tfring.rank())
    with pytest.raises(ValueError, match="use_ema"):
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)


def _shared_dir(tmp_path):
    """Rank 0's tmp_path, for every rank (one machine)."""
    return tfring.broadcast_object(str(tmp_path), 0, name="sharded.tmp")


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


def test_checkpoints_hold_the_whole_state_as_unsharded_and_resume(tmp_path):
    root = _shared_dir(tmp_path)
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
    with pytest.raises(NotImplementedError, match="tf.train.Checkpoint"):
        tf.train.Checkpoint(model=model).write(str(tmp_path / f"ckpt{tfring.rank()}"))


def test_sparse_gradients_need_sparse_as_dense():
    def fit(sparse_as_dense):
        keras.utils.set_random_seed(5)
        ids = keras.Input((1,), dtype="int32")
        out = keras.layers.Dense(1)(keras.layers.Flatten()(keras.layers.Embedding(9, 3)(ids)))
        model = keras.Model(ids, out)
        model.compile(optimizer=tk.DistributedOptimizer(
            keras.optimizers.Adam(0.01), shard_optimizer_state=True,
            sparse_as_dense=sparse_as_dense), loss="mse")
        rng = np.random.default_rng(tfring.rank())
        model.fit(rng.integers(0, 9, size=(8, 1)).astype(np.int32),
                  rng.normal(size=(8, 1)).astype(np.float32), batch_size=4, verbose=0)
        return model

    with pytest.raises(ValueError, match="sparse_as_dense=True"):
        fit(False)
    _assert_same_on_every_rank(_flat(fit(True).get_weights()))
