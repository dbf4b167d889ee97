"""model.fit when ranks hold different numbers of batches, for Keras 3 and tf_keras: rank r
has 10 + 3 r batches (10 and 13 at 2 ranks). It must neither hang nor drop the tail: the
ranks that run out join, their gradients count as absent (the average is over the ranks that
still have data), and every rank ends with the weights of an independent numpy computation
of exactly that."""

import warnings

import numpy as np
import tensorflow as tf

import tfring
import tfring.keras

BATCH = 4
LR = 0.05
EPOCHS = 2
TRUE_W = np.array([[1.0], [-2.0], [0.5]])


def _batches(r):
    return 10 + 3 * r


def _data(r):
    rng = np.random.default_rng(50 + r)
    x = rng.normal(size=(_batches(r) * BATCH, 3))
    y = x @ TRUE_W + 0.3 + 0.1 * rng.normal(size=(len(x), 1))
    return x.astype(np.float32), y.astype(np.float32)


def _numpy_reference(size):
    """SGD on the mean squared error, each step averaging the gradients of the ranks that
    still have a batch for it."""
    w, b = np.zeros((3, 1)), 0.0
    data = [_data(r) for r in range(size)]
    for _ in range(EPOCHS):
        for step in range(max(_batches(r) for r in range(size))):
            grads = []
            for r in range(size):
                if step >= _batches(r):
                    continue
                xb = data[r][0][step * BATCH:(step + 1) * BATCH].astype(np.float64)
                yb = data[r][1][step * BATCH:(step + 1) * BATCH].astype(np.float64)
                diff = xb @ w + b - yb
                grads.append((2.0 / BATCH * xb.T @ diff, 2.0 / BATCH * diff.sum()))
            w = w - LR * np.mean([g[0] for g in grads], axis=0)
            b = b - LR * np.mean([g[1] for g in grads])
    return w, b


def check_fit_with_uneven_batches(keras, rank, size):
    """Fits on rank's batches with tfring's callbacks and checks the result (see above)."""
    x, y = _data(rank)
    model = keras.Sequential([keras.Input((3,)),
                              keras.layers.Dense(1, kernel_initializer="zeros")])
    model.compile(optimizer=tfring.keras.DistributedOptimizer(keras.optimizers.SGD(LR)),
                  loss="mse")
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = model.fit(dataset, epochs=EPOCHS, verbose=0, callbacks=[
            tfring.keras.callbacks.BroadcastGlobalVariablesCallback(0),
            tfring.keras.callbacks.MetricAverageCallback()])
    assert len(history.history["loss"]) == EPOCHS
    if rank == 0:
        assert any("uneven data" in str(w.message) for w in caught)

    # No step of the longest rank was dropped, and every rank has its optimizer state.
    assert int(model.optimizer.iterations.numpy()) == EPOCHS * _batches(size - 1)
    w, b = model.get_weights()
    flat = np.concatenate([w.ravel(), b.ravel()])
    everyone = tfring.allgather(flat[None], name="uneven.weights").numpy()
    for row in everyone:
        np.testing.assert_array_equal(row, flat)
    want_w, want_b = _numpy_reference(size)
    np.testing.assert_allclose(w, want_w, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(b, [want_b], rtol=2e-5, atol=2e-6)
