"""Helpers of the shard_optimizer_state=True tests: a model whose variables (42 + 7 + 35 + 5
+ 5 + 1 = 95 elements) do not divide into the ranks' blocks at 2 or 3 ranks, so blocks
split variables; each rank's data; unsharded against sharded."""

import keras
import numpy as np
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
