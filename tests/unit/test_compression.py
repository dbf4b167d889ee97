"""Compression round trips (one process)."""

import numpy as np
import tensorflow as tf

import tfring


def test_fp16_casts_floats_for_the_wire_and_back():
    x = tf.constant([1.0, 0.1, -3.5], tf.float32)
    sent, ctx = tfring.Compression.fp16.compress(x)
    assert sent.dtype == tf.float16
    back = tfring.Compression.fp16.decompress(sent, ctx)
    assert back.dtype == tf.float32
    np.testing.assert_allclose(back.numpy(), x.numpy(), rtol=1e-3)


def test_fp16_leaves_integers_and_none_leaves_everything():
    i = tf.constant([1, 2], tf.int64)
    sent, ctx = tfring.Compression.fp16.compress(i)
    assert sent.dtype == tf.int64 and tfring.Compression.fp16.decompress(sent, ctx) is sent
    x = tf.constant([0.1], tf.float64)
    sent, ctx = tfring.Compression.none.compress(x)
    assert sent is x and tfring.Compression.none.decompress(sent, ctx) is x
