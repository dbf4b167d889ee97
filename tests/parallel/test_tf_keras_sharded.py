"""shard_optimizer_state=True on tf_keras optimizers (TF_USE_LEGACY_KERAS=1): training equals
unsharded training, weights are the same on every rank, each rank holds its block of the
state, and checkpoints hold the whole state as the unsharded optimizer does.

The suite runs this file with TF_USE_LEGACY_KERAS=1 at 2 and 3 ranks (its own stages); in
the Keras 3 runs it is skipped. The model's 95 weights (160 padded) split variables between blocks.
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

from _sharded_util import BATCH, block_size, _assert_same_on_every_rank, _data, _flat, \
    check_accumulation_and_mixed_precision, check_fp16_compression, \
    check_loss_scale_skips_on_every_rank, check_one_reducescatter_and_one_grouped_allgather, \
    clipping_optimizers, optimizers  # noqa: E402
import _sharded_util  # noqa: E402

keras = tf.keras


def _model():
    return _sharded_util._model(keras)


def _compiled(make_optimizer, sharded, jit_compile=False, **options):
    model = _model()
    model.compile(optimizer=hvd.DistributedOptimizer(make_optimizer(),
                                                     shard_optimizer_state=sharded, **options),
                  loss="mse", jit_compile=jit_compile)
    return model


def _fit(model, callbacks=()):
    x, y = _data(tfring.rank())
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
              callbacks=list(callbacks))
    return model


def _compare(make_optimizer, **options):
    _sharded_util._compare(make_optimizer, k=keras, **options)


@pytest.mark.parametrize("make_optimizer", optimizers(keras)[0] + clipping_optimizers(keras)[0],
                         ids=optimizers(keras)[1] + clipping_optimizers(keras)[1])
def test_equals_unsharded(make_optimizer):
    _compare(make_optimizer)


def test_accumulation_and_mixed_precision():
    check_accumulation_and_mixed_precision(
        keras, lambda inner, scale: keras.mixed_precision.LossScaleOptimizer(inner, initial_scale=scale))


def test_fp16_compression_sends_float16_and_rounds_as_unsharded():
    check_fp16_compression(
        keras, lambda: keras.optimizers.SGD(1.0),
        lambda opt, grads, variables: opt.apply_gradients(zip(grads, variables)),
        lambda opt, variables: opt.build(variables))


def test_a_step_issues_one_grouped_reducescatter_and_one_grouped_allgather(rank):
    """AdamW with the biases excluded from decay: two groups of float32, one reducescatter
    and one grouped allgather; as unsharded."""
    results = {}
    for sharded in (False, True):
        model = _model()
        variables = model.trainable_variables
        optimizer = hvd.DistributedOptimizer(_sharded_util._adamw(keras),
                                             shard_optimizer_state=sharded)
        optimizer.build(variables)
        rng = np.random.default_rng(rank)
        grads = [tf.constant(rng.normal(size=v.shape).astype(np.float32)) for v in variables]
        step = tf.function(lambda: optimizer.apply_gradients(zip(grads, variables)))
        step()
        step()
        results[sharded] = (_flat(model.get_weights()), optimizer)
    check_one_reducescatter_and_one_grouped_allgather(step, optimizer, results)


def test_loss_scale_skips_on_every_rank_when_one_block_is_not_finite(rank):
    # tf_keras's apply_gradients takes unscaled gradients: ones move each weight by 0.1.
    check_loss_scale_skips_on_every_rank(
        rank, keras,
        lambda sgd: keras.mixed_precision.LossScaleOptimizer(sgd, initial_scale=4.0),
        lambda opt, grads, variables: opt.apply_gradients(zip(grads, variables)),
        lambda opt: opt.loss_scale.numpy(), 0.1)


@pytest.mark.parametrize("make_optimizer", [lambda: keras.optimizers.Adam(0.01), lambda: _sharded_util._adamw(keras)],
                         ids=["adam", "adamw-two-groups"])
def test_jit_compile_keeps_xla(make_optimizer):
    # As on Keras 3: the compiled step sums the placed blocks where an allgather could not
    # run, and equals the unsharded step under XLA.
    _compare(make_optimizer, jit_compile=True)


def test_state_is_a_block(rank, size):
    model = _fit(_compiled(lambda: keras.optimizers.Adam(0.01), True))
    state = [v for v in model.optimizer.variables if int(np.prod(v.shape)) > 1]
    mine = sum(int(np.prod(v.shape)) for v in state)
    assert mine == 2 * block_size(rank, size), [v.shape for v in state]
    _assert_same_on_every_rank(_flat(model.get_weights()))


def test_refusals_say_why():
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:  # tf_keras's compile() would wrap it in a LossScaleOptimizer of its own
        with pytest.raises(ValueError, match="wrap the optimizer in"):
            hvd.DistributedOptimizer(keras.optimizers.Adam(0.01), shard_optimizer_state=True)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    with pytest.raises(ValueError, match="Adasum"):
        hvd.DistributedOptimizer(keras.optimizers.Adam(0.01), shard_optimizer_state=True,
                                 op=tfring.Adasum)
    opt = hvd.DistributedOptimizer(keras.optimizers.Adam(0.01), shard_optimizer_state=True)
    with pytest.raises(ValueError, match="cannot keep a variable local"):
        opt.register_local_var(tf.Variable(1.0))
    with pytest.raises(ValueError, match="does not support use_ema=True"):
        hvd.DistributedOptimizer(keras.optimizers.Adam(0.01, use_ema=True),
                                 shard_optimizer_state=True)
    with pytest.raises(ValueError, match="cannot keep local_layers local"):
        hvd.PartialDistributedOptimizer(keras.optimizers.Adam(0.01), shard_optimizer_state=True,
                                        local_layers=[keras.layers.Dense(2)])


def _checkpoint_state(path):
    return {k: tf.train.load_variable(path, k) for k, _ in tf.train.list_variables(path)
            if "/optimizer/" in k}


def _hdf5_state(path):
    """{name: value} of the optimizer weights in a tf_keras HDF5 model file, in its order."""
    import h5py
    with h5py.File(path, "r") as f:
        group = f["optimizer_weights"]
        return {name.decode("utf8") if isinstance(name, bytes) else name: np.array(group[name])
                for name in group.attrs["weight_names"]}


@pytest.mark.parametrize("loss_scale", [False, True], ids=["adam", "loss-scale-adam"])
def test_checkpoints_hold_the_whole_state_and_resume(shared_tmp_path, loss_scale):
    root = shared_tmp_path

    def make():
        adam = keras.optimizers.Adam(0.01)
        return keras.mixed_precision.LossScaleOptimizer(adam) if loss_scale else adam

    sharded = _fit(_compiled(make, True), [hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    unsharded = _fit(_compiled(make, False))
    if tfring.rank() == 0:  # gathered at the epoch's end by tfring's callback
        tf.train.Checkpoint(model=sharded).write(f"{root}/sharded")
        tf.train.Checkpoint(model=unsharded).write(f"{root}/unsharded")
        sharded.save(f"{root}/sharded.keras")
        got, want = _checkpoint_state(f"{root}/sharded"), _checkpoint_state(f"{root}/unsharded")
        assert sorted(got) == sorted(want) and len(want) > 6, (sorted(got), sorted(want))
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-7,
                                       err_msg=key)
        # HDF5 files (Horovod's examples checkpoint to .h5) hold the same, named alike.
        sharded.save(f"{root}/sharded.h5")
        unsharded.save(f"{root}/unsharded.h5")
        got, want = _hdf5_state(f"{root}/sharded.h5"), _hdf5_state(f"{root}/unsharded.h5")
        # The two models' layers are named apart (dense, dense_3, ...): each name ends with
        # the same slot of the same model variable.
        renamed = {u.name.split(":")[0]: v.name.split(":")[0] for u, v in
                   zip(unsharded.trainable_variables, sharded.trainable_variables)}
        assert len(got) == len(want) > 6, (list(got), list(want))
        for got_name, want_name in zip(got, want):
            for old_name, new_name in renamed.items():
                if want_name.endswith(f"/{old_name}:0"):
                    want_name = want_name.replace(old_name, new_name)
            assert got_name.endswith(want_name.split("/", 1)[-1]), (got_name, want_name)
        for got_value, want_value in zip(got.values(), want.values()):
            np.testing.assert_allclose(got_value, want_value, rtol=1e-5, atol=1e-7)
        # A plain tf_keras optimizer loads either file's optimizer state (tf_keras itself
        # does not load a LossScaleOptimizer's from HDF5: it warns and starts afresh).
        for path in ("sharded.keras",) + (() if loss_scale else ("sharded.h5",)):
            plain = keras.models.load_model(f"{root}/{path}")
            for got_v, want_v in zip(plain.optimizer.variables, unsharded.optimizer.variables):
                np.testing.assert_allclose(got_v.numpy(), want_v.numpy(), rtol=1e-5,
                                           atol=1e-7, err_msg=path)
    tfring.barrier()
    finals = []
    for shard, name in ((True, "unsharded"), (False, "sharded"), (True, "sharded")):
        model = _compiled(make, shard)
        model.optimizer.build(model.trainable_variables)
        tf.train.Checkpoint(model=model).read(f"{root}/{name}").assert_existing_objects_matched()
        finals.append(_flat(_fit(model).get_weights()))
    # Sharded, from the HDF5 file's weights and optimizer weights (set_weights takes the
    # whole state, as the unsharded optimizer has it).
    model = _compiled(make, True)
    model.optimizer.build(model.trainable_variables)
    model.load_weights(f"{root}/sharded.h5")
    model.optimizer.set_weights(list(_hdf5_state(f"{root}/sharded.h5").values()))
    finals.append(_flat(_fit(model).get_weights()))
    for final in finals[1:]:
        np.testing.assert_allclose(final, finals[0], rtol=1e-5, atol=1e-6)
    _assert_same_on_every_rank(finals[0])
