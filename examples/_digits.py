"""The examples' data: scikit-learn's handwritten digits (1,797 8x8 images, 10 classes),
which ship inside the scikit-learn package, so nothing is downloaded. Every rank loads the
same split and trains on its own shard of the training set."""

import numpy as np


def load(rank, size, seed=0):
    """(x_train_shard, y_train_shard, x_test, y_test) as float32 / int64 arrays."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    n_test = 360
    x_train, y_train = x[n_test:], y[n_test:]
    return x_train[rank::size], y_train[rank::size], x[:n_test], y[:n_test]
