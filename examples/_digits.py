"""The examples' data: handwritten digits (1,797 8x8 images, 10 classes), in
data/digits.csv.gz beside this file, so nothing is downloaded. It is the test set of the UCI
"Optical Recognition of Handwritten Digits" data (E. Alpaydin and C. Kaynak, 1998; CC BY 4.0,
https://archive.ics.uci.edu/dataset/80), as scikit-learn ships it: 64 pixel counts (0-16) and
the digit, one image per line. Every rank loads the same split and trains on its own shard
of the training set."""

import os

import numpy as np

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "digits.csv.gz")


def load(rank, size, seed=0):
    """(x_train_shard, y_train_shard, x_test, y_test) as float32 / int64 arrays."""
    table = np.loadtxt(DATA, delimiter=",", dtype=np.int64)
    x = (table[:, :64] / 16.0).astype(np.float32)
    y = table[:, 64]
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    n_test = 360
    x_train, y_train = x[n_test:], y[n_test:]
    return x_train[rank::size], y_train[rank::size], x[:n_test], y[:n_test]
