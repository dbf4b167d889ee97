"""model.fit (Keras 3) with 10 and 13 batches on 2 ranks (10 + 3 r on rank r), and with a
short last batch: see _uneven_fit.py; test_tf_keras.py runs the first with tf_keras."""

import keras

from _uneven_fit import check_fit_with_uneven_batches, short_last_batch_samples


def test_fit_with_10_and_13_batches(rank, size):
    check_fit_with_uneven_batches(keras, rank, size)


def test_fit_with_a_short_last_batch_on_one_rank(rank, size):
    # Rank 1: 10 full batches and one of 2 samples, which it runs alone while the others
    # have joined (at 3 ranks rank 2's 10th batch is short too, beside full ones).
    check_fit_with_uneven_batches(keras, rank, size, samples=short_last_batch_samples)
