"""SyncBatchNormalization against one process on the global batch: statistics with uneven
batches, gradients, and model.fit (identical weights on every rank, equal to one process)."""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfring
import tfring.keras as hvd
from tfring.keras import sync_batch_norm
from _keras_problem import BATCH, FEATURES, assert_same_on_all_ranks, global_data, shard

CHANNELS = 3


def rank_batch(r):
    """Rank r's batch: r + 2 rows (uneven), with an offset so cancellation would show."""
    rng = np.random.default_rng(40 + r)
    return (rng.normal(size=(r + 2, CHANNELS)) * (r + 1) + 10.0).astype(np.float32)


def test_statistics_are_the_global_batchs_with_uneven_batches(rank, size):
    layer = tfring.SyncBatchNormalization(momentum=0.5, epsilon=1e-3)
    out = layer(tf.constant(rank_batch(rank)), training=True).numpy()
    everything = np.concatenate([rank_batch(r) for r in range(size)]).astype(np.float64)
    mean, var = everything.mean(0), everything.var(0)
    start = sum(r + 2 for r in range(rank))
    want = (everything[start:start + rank + 2] - mean) / np.sqrt(var + 1e-3)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(layer.moving_mean.numpy(), 0.5 * mean, rtol=1e-5)
    np.testing.assert_allclose(layer.moving_variance.numpy(), 0.5 + 0.5 * var, rtol=1e-5)


def test_horovod_constructor_arguments():
    assert tfring.SyncBatchNormalization(fused=False).name.startswith("sync_batch_normalization")
    with pytest.raises(ValueError, match="fused=True"):
        tfring.SyncBatchNormalization(fused=True)


def test_keras2_arguments_build_on_keras_3(recwarn, monkeypatch):
    # Horovod-era code passes Keras 2 arguments that Keras 3's layer lacks: at their Keras 2
    # defaults nothing is said; another value is ignored with one warning, once per process.
    monkeypatch.setattr(sync_batch_norm, "_warned_keras2_only", [])
    layer = tfring.SyncBatchNormalization(axis=-1, momentum=0.9, fused=False, renorm=False,
                                          virtual_batch_size=None, adjustment=None)
    assert layer.momentum == 0.9
    assert not [w for w in recwarn if "ignores" in str(w.message)]
    with pytest.warns(UserWarning, match="ignores renorm, renorm_clipping"):
        tfring.SyncBatchNormalization(fused=False, renorm=True,
                                      renorm_clipping={"rmax": 3.0, "rmin": 0.3, "dmax": 5.0})
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        tfring.SyncBatchNormalization(fused=False, renorm=True)
    assert not [w for w in again if "ignores" in str(w.message)]


@pytest.mark.parametrize("in_function", [False, True], ids=["eager", "function"])
def test_gradients_equal_one_process_on_the_global_batch(in_function, rank, size):
    def build(layer_class, seed):
        keras.utils.set_random_seed(seed)
        return keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(CHANNELS),
                                 layer_class(), keras.layers.Dense(1)])

    x, _, y = global_data(1, size)
    mine = shard((x, y), rank, size)
    model = build(tfring.SyncBatchNormalization, seed=3)

    def step(features, targets):  # a custom training loop's step
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(features, training=True) - targets))
        return [tfring.allreduce(g)  # averaged, as DistributedOptimizer does
                for g in tape.gradient(loss, model.trainable_variables)]

    if in_function:
        step = tf.function(step)
    grads = [g.numpy() for g in step(tf.constant(mine[0]), tf.constant(mine[1]))]
    reference = build(keras.layers.BatchNormalization, seed=3)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(reference(x, training=True) - y))
    for got, want in zip(grads, tape.gradient(loss, reference.trainable_variables)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5)


def test_model_fit_ends_with_identical_weights_equal_to_one_process(rank, size):
    def build(layer_class, seed):
        keras.utils.set_random_seed(seed)
        return keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(4),
                                 layer_class(), keras.layers.Dense(1)])

    steps = 3
    x, _, y = global_data(steps, size)
    model = build(tfring.SyncBatchNormalization, seed=1 if rank == 0 else 9)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
    mine = shard((x, y), rank, size)
    model.fit(mine[0], mine[1], batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    weights = [np.asarray(w) for w in model.weights]
    assert_same_on_all_ranks(weights, "sbn.fit")
    reference = build(keras.layers.BatchNormalization, seed=1)
    reference.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    reference.fit(x, y, batch_size=size * BATCH, epochs=1, shuffle=False, verbose=0)
    for got, want in zip(weights, reference.weights):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5)
