"""model.fit when ranks hold different numbers of batches, for Keras 3 and tf_keras: rank r
has 10 + 3 r batches (10 and 13 at 2 ranks). It must neither hang nor drop the tail: the
ranks that run out join, their gradients count as absent (the average is over the ranks that
still have data), and every rank ends with the weights of an independent numpy computation
of exactly that.

check_fit_with_uneven_batches(..., samples=short_last_batch_samples) gives rank 1 a short
last batch that it runs alone (10 B + 2 samples, the others 10 B), and at 3 ranks rank 2 a
short last batch among the others' full ones (9 B + 3): a short batch's gradient is the mean
over its own samples (Keras's loss), and it counts as one rank's, as a full batch does."""

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


def uneven_batch_samples(r):
    """Rank r's number of samples: 10 + 3 r full batches."""
    return _batches(r) * BATCH


def short_last_batch_samples(r):
    """10 full batches and a short one of 2 on rank 1; 9 full and a short one of 3 on rank
    2 (its 10th step, with the others' full 10th batches); 10 full batches elsewhere."""
    return {1: 10 * BATCH + 2, 2: 9 * BATCH + 3}.get(r, 10 * BATCH)


def _data(r, samples=uneven_batch_samples):
    rng = np.random.default_rng(50 + r)
    x = rng.normal(size=(samples(r), 3))
    y = x @ TRUE_W + 0.3 + 0.1 * rng.normal(size=(len(x), 1))
    return x.astype(np.float32), y.astype(np.float32)


def _steps(n):
    return -(-n // BATCH)  # the last batch may be short


def _numpy_reference(size, samples=uneven_batch_samples):
    """SGD on the mean squared error, each step averaging the gradients of the ranks that
    still have a batch for it; each rank's gradient is the mean over its batch's samples,
    however many (a short last batch has fewer)."""
    w, b = np.zeros((3, 1)), 0.0
    data = [_data(r, samples) for r in range(size)]
    for _ in range(EPOCHS):
        for step in range(max(_steps(samples(r)) for r in range(size))):
            grads = []
            for r in range(size):
                if step >= _steps(samples(r)):
                    continue
                xb = data[r][0][step * BATCH:(step + 1) * BATCH].astype(np.float64)
                yb = data[r][1][step * BATCH:(step + 1) * BATCH].astype(np.float64)
                diff = xb @ w + b - yb
                grads.append((2.0 / len(xb) * xb.T @ diff, 2.0 / len(xb) * diff.sum()))
            w = w - LR * np.mean([g[0] for g in grads], axis=0)
            b = b - LR * np.mean([g[1] for g in grads])
    return w, b


def check_fit_with_uneven_batches(keras, rank, size, samples=uneven_batch_samples):
    """Fits on rank's batches with tfring's callbacks and checks the result (see above);
    `samples(r)`: rank r's number of samples."""
    x, y = _data(rank, samples)
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
    assert int(model.optimizer.iterations.numpy()) == \
        EPOCHS * max(_steps(samples(r)) for r in range(size))
    w, b = model.get_weights()
    flat = np.concatenate([w.ravel(), b.ravel()])
    everyone = tfring.allgather(flat[None], name="uneven.weights").numpy()
    for row in everyone:
        np.testing.assert_array_equal(row, flat)
    want_w, want_b = _numpy_reference(size, samples)
    np.testing.assert_allclose(w, want_w, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(b, [want_b], rtol=2e-5, atol=2e-6)
