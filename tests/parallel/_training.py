"""A small deterministic regression problem for the training tests: every rank can build
the whole global batch, train on its own shard, and recompute the single-process result."""

import numpy as np
import tensorflow as tf

import tfring

FEATURES, HIDDEN, VOCAB, EMBED = 6, 5, 12, 3
PER_RANK = 4  # examples per rank per step


def global_batch(step, size):
    rng = np.random.default_rng(500 + step)
    n = PER_RANK * size
    x = rng.normal(size=(n, FEATURES)).astype(np.float32)
    ids = rng.integers(0, VOCAB, size=(n,)).astype(np.int64)
    y = rng.normal(size=(n, 1)).astype(np.float32)
    return x, ids, y


def shard(batch, rank):
    return tuple(a[rank * PER_RANK:(rank + 1) * PER_RANK] for a in batch)


def initial_values(seed):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(FEATURES, HIDDEN)).astype(np.float32) * 0.3,
            np.zeros(HIDDEN, np.float32),
            rng.normal(size=(VOCAB, EMBED)).astype(np.float32) * 0.3,
            rng.normal(size=(HIDDEN + EMBED, 1)).astype(np.float32) * 0.3]


def make_variables(seed):
    return [tf.Variable(v, name=n) for v, n in
            zip(initial_values(seed), ("w1", "b1", "embedding", "w2"))]


def loss_fn(variables, x, ids, y):
    w1, b1, embedding, w2 = variables
    hidden = tf.tanh(tf.matmul(x, w1) + b1)
    embedded = tf.gather(embedding, ids)  # its gradient is a tf.IndexedSlices
    pred = tf.matmul(tf.concat([hidden, embedded], axis=1), w2)
    return tf.reduce_mean((pred - y) ** 2)


def reference_weights(steps, size, lr, seed=1, passes=1):
    """Plain single-process SGD on the whole global batch (what 2 ranks at B must match).

    With passes > 1, applied step k uses the global batches of micro-steps k*passes ...
    (k+1)*passes-1 together: what accumulation with averaging must match.
    """
    variables = make_variables(seed)
    opt = tf.keras.optimizers.SGD(lr)
    for step in range(steps):
        micro = [global_batch(step * passes + p, size) for p in range(passes)]
        x, ids, y = (np.concatenate(parts) for parts in zip(*micro))
        with tf.GradientTape() as tape:
            loss = loss_fn(variables, x, ids, y)
        grads = tape.gradient(loss, variables)
        opt.apply_gradients(zip(grads, variables))
    return [v.numpy() for v in variables]


def assert_identical_across_ranks(arrays, label):
    """Every rank's arrays must be bitwise equal to rank 0's."""
    for i, a in enumerate(arrays):
        root = tfring.broadcast(tf.constant(a), 0, name=f"{label}.check.{i}").numpy()
        np.testing.assert_array_equal(a, root, err_msg=f"{label}: variable {i} differs from rank 0")
