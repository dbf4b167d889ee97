"""model.fit (Keras 3) with 10 and 13 batches on 2 ranks (10 + 3 r on rank r): see
_uneven_fit.py; test_tf_keras.py runs the same with tf_keras."""

import keras

from _uneven_fit import check_fit_with_uneven_batches


def test_fit_with_10_and_13_batches(rank, size):
    check_fit_with_uneven_batches(keras, rank, size)
