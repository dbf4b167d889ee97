"""tfring.keras.DistributedOptimizer(shard_optimizer_state=True) on Keras 3: training equals
unsharded training, every rank ends each step with the same weights, each rank holds its
block of the optimizer state only, and what the mode cannot do is refused, saying why.

Checkpoints: test_sharded_checkpoints.py."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfring
import tfring.keras as tk

from _sharded_util import BATCH, PADDED_TOTAL, STEPS, _adamw, _assert_same_on_every_rank, \
    _compare, block_size, _data, _fit, _flat, _model, \
    check_accumulation_and_mixed_precision, check_fp16_compression, \
    check_loss_scale_skips_on_every_rank, check_one_reducescatter_and_one_grouped_allgather, \
    clipping_optimizers, optimizers


@pytest.mark.parametrize("make_optimizer", optimizers()[0], ids=optimizers()[1])
def test_equals_unsharded(make_optimizer):
    _compare(make_optimizer)


@pytest.mark.parametrize("make_optimizer", clipping_optimizers()[0],
                         ids=clipping_optimizers()[1])
def test_clipping_uses_whole_norms(make_optimizer):
    _compare(make_optimizer)


@pytest.mark.parametrize("make_optimizer", [lambda: keras.optimizers.Adam(0.01), _adamw],
                         ids=["adam", "adamw-two-groups"])
def test_jit_compile_keeps_xla(make_optimizer, recwarn):
    # The step stays compiled (an allgather could not be: there the blocks are summed into
    # place), and equals the unsharded step under XLA.
    _compare(make_optimizer, jit_compile=True)
    assert not [w for w in recwarn if "jit_compile (XLA) is off" in str(w.message)]


def test_accumulation_and_mixed_precision():
    check_accumulation_and_mixed_precision(
        keras, lambda inner, scale: keras.optimizers.LossScaleOptimizer(inner, initial_scale=scale))


def test_fp16_compression_sends_float16_and_rounds_as_unsharded():
    check_fp16_compression(keras, lambda: keras.optimizers.SGD(1.0),
                           lambda opt, grads, variables: opt.apply(grads, variables),
                           lambda opt, variables: opt.build(variables))


def test_a_step_issues_one_grouped_reducescatter_and_one_grouped_allgather(rank):
    """AdamW with the biases excluded from decay: two groups of float32, one reducescatter
    (the groups as rows of one tensor) and one grouped allgather; as unsharded."""
    rng = np.random.default_rng(rank)
    results = {}
    for sharded in (False, True):
        model = _model()
        variables = model.trainable_variables
        optimizer = tk.DistributedOptimizer(_adamw(), shard_optimizer_state=sharded)
        optimizer.build(variables)
        grads = [tf.constant(rng.normal(size=v.shape).astype(np.float32)) for v in variables]
        step = tf.function(lambda: optimizer.apply(grads, variables))
        step()
        step()
        results[sharded] = (_flat(model.get_weights()), optimizer)
        rng = np.random.default_rng(rank)  # the same gradients again
    check_one_reducescatter_and_one_grouped_allgather(step, optimizer, results)


def test_loss_scale_skips_on_every_rank_when_one_block_is_not_finite(rank):
    # Keras 3's apply unscales: ones at scale 2 move each weight by 0.1 / 2.
    check_loss_scale_skips_on_every_rank(
        rank, keras, lambda sgd: keras.optimizers.LossScaleOptimizer(sgd, initial_scale=4.0),
        lambda opt, grads, variables: opt.apply(grads, variables),
        lambda opt: opt.dynamic_scale.numpy(), 0.1 / 2.0)


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
    assert mine == 2 * block_size(rank, size), [v.shape for v in state]
    total = tfring.allreduce(tf.constant(mine), op=tfring.Sum).numpy()
    assert total == 2 * PADDED_TOTAL


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
    with pytest.raises(ValueError, match="cannot keep local_layers local"):
        tk.PartialDistributedOptimizer(sgd, shard_optimizer_state=True,
                                       local_layers=[keras.layers.Dense(2)])
    # Known at construction, so refused there (and in a LossScaleOptimizer).
    with pytest.raises(ValueError, match="does not support use_ema=True"):
        tk.DistributedOptimizer(keras.optimizers.SGD(0.1, use_ema=True),
                                shard_optimizer_state=True)
    with pytest.raises(ValueError, match="does not support use_ema=True"):
        tk.DistributedOptimizer(keras.optimizers.LossScaleOptimizer(
            keras.optimizers.SGD(0.1, use_ema=True)), shard_optimizer_state=True)


def test_a_step_while_a_rank_has_joined_fails_saying_so(rank, size):
    # Uneven data: rank 0 ran out and joined; the others' next step names it, no hang.
    model = _model()
    optimizer = tk.DistributedOptimizer(keras.optimizers.Adam(0.01), shard_optimizer_state=True)
    optimizer.build(model.trainable_variables)
    if rank == 0:
        tfring.join()
        return
    grads = [tf.ones_like(v) for v in model.trainable_variables]
    try:
        with pytest.raises(tf.errors.FailedPreconditionError,
                           match=r"rank\(s\) \[0\] have joined.*shard_optimizer_state=True"):
            optimizer.apply(grads, model.trainable_variables)
    finally:  # rank 0 waits for every rank to join, whatever happened here
        tfring.join()


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


def test_variables_of_several_dtypes_train_as_unsharded():
    """float32, float64 and float16 layers: three buffers, each padded for its element size
    (16, 8 and 32 elements to 64 bytes), blocks of each split over the ranks."""
    def fit(sharded):
        keras.utils.set_random_seed(4)
        x = keras.Input((6,))
        h = keras.layers.Dense(9, activation="tanh", dtype="float64")(x)
        h = keras.layers.Dense(11, activation="tanh", dtype="float16")(h)
        out = keras.layers.Dense(1, dtype="float32")(h)
        model = keras.Model(x, out)
        initial = _flat([w.astype(np.float64) for w in model.get_weights()])
        model.compile(optimizer=tk.DistributedOptimizer(
            keras.optimizers.SGD(0.05, momentum=0.9), shard_optimizer_state=sharded),
            loss="mse")
        xs, ys = _data(tfring.rank())
        model.fit(xs, ys, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
        dtypes = sorted({v.dtype for v in model.trainable_variables})
        return initial, _flat([w.astype(np.float64) for w in model.get_weights()]), dtypes

    initial, plain, dtypes = fit(False)
    _, sharded, _ = fit(True)
    assert dtypes == ["float16", "float32", "float64"], dtypes
    assert np.abs(plain - initial).max() > 1e-3, "training did not move the weights"
    # float16 arithmetic: the sum's order differs between a reducescatter and an allreduce.
    np.testing.assert_allclose(sharded, plain, rtol=2e-3, atol=2e-3)
    _assert_same_on_every_rank(sharded)
