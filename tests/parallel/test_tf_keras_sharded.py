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

from _sharded_util import ADAMW_GROUPS, BATCH, _assert_same_on_every_rank, _data, _flat, \
    check_accumulation_and_loss_scale, check_apply_equals_unsharded, check_fp16_compression, \
    check_loss_scale_skips_on_every_rank, check_one_reducescatter_and_one_grouped_allgather, \
    check_xla_step, sweep, tf_keras_apply  # noqa: E402
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


@pytest.mark.parametrize("make_optimizer,groups", sweep(keras)[0], ids=sweep(keras)[1])
def test_apply_equals_the_plain_optimizer_on_averaged_gradients(make_optimizer, groups):
    # apply_gradients of the hooked optimizer, a few steps in a tf.function, against the
    # same tf_keras optimizer without tfring given the average of every rank's gradients.
    check_apply_equals_unsharded(make_optimizer, keras, tf_keras_apply, groups=groups)


def test_fit_equals_unsharded_fit():
    """The one fit-based comparison on tf_keras: model.fit's train step through the hooked
    optimizer, sharded against unsharded, each rank its own data; the weights the same on
    every rank after every batch, and each rank's Adam moments its block only."""
    _sharded_util._compare(lambda: keras.optimizers.Adam(0.01), k=keras)


def test_accumulation_and_loss_scale():
    # tf_keras's LossScaleOptimizer.apply_gradients takes unscaled gradients; `iterations`
    # counts every pass, as Horovod's.
    check_accumulation_and_loss_scale(
        keras,
        lambda inner, scale: keras.mixed_precision.LossScaleOptimizer(inner, initial_scale=scale),
        tf_keras_apply, 1.0, counted_passes=True)


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


@pytest.mark.parametrize("make_optimizer,groups",
                         [(lambda: keras.optimizers.Adam(0.01), None),
                          (lambda: _sharded_util._adamw(keras), ADAMW_GROUPS)],
                         ids=["adam", "adamw-two-groups"])
def test_jit_compile_keeps_xla(make_optimizer, groups):
    # As on Keras 3: the compiled step sums the placed blocks where an allgather could not
    # run, and equals the plain optimizer's step under XLA.
    check_xla_step(make_optimizer, keras, groups, apply=tf_keras_apply)


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


def test_building_refuses_state_not_kept_element_by_element():
    """An optimizer that keeps one number per variable (a norm, say) keeps state that no
    block holds a part of: refused when built, naming the slot and its shape. (Adafactor's
    factored moments are not caught so: it factors 2-D variables only, and the blocks are
    1-D; test_sharded_refusals.py has that gap.)"""
    class PerVariableNorm(keras.optimizers.SGD):
        def build(self, var_list):
            super().build(var_list)
            self._norms = [self.add_variable_from_reference(v, "norm", shape=[])
                           for v in var_list]

    optimizer = hvd.DistributedOptimizer(PerVariableNorm(0.1), shard_optimizer_state=True)
    with pytest.raises(ValueError, match=r"PerVariableNorm keeps a 'norm' of shape \(\) for a "
                                         r"block of \(\d+,\).*kept element by element"):
        optimizer.build(_model().trainable_variables)


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
            got_vs, want_vs = plain.optimizer.variables, unsharded.optimizer.variables
            # zip stops at the shorter: the same count first (Adam's moments and counter).
            assert len(got_vs) == len(want_vs) > 6, (path, len(got_vs), len(want_vs))
            for got_v, want_v in zip(got_vs, want_vs):
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
