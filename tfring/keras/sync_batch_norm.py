"""SyncBatchNormalization: batch normalization with the statistics of the global batch.

Horovod's layer, for Keras 3 and for tf_keras (TF_USE_LEGACY_KERAS=1). In training, each rank
computes per channel its count, its mean and the sum of squared deviations from it; one
grouped allreduce adds every rank's count, count * mean and deviations + count * mean^2
(in float64, so that the combination loses nothing), from which the global mean and
variance follow. Ranks are weighted by their batch sizes, so the statistics equal those of
one process on the concatenated batch even when batches differ (Horovod averages the ranks'
means, which is wrong then). The gradient flows through the allreduce, whose gradient sums
the ranks' upstream gradients: with DistributedOptimizer averaging over ranks, training
equals one process on the global batch.

Horovod's constructor arguments are accepted: `fused=False` (the default; Keras 3's layer
has no such argument, and a fused kernel cannot synchronize, so True and None are refused
as Horovod refuses them), and every argument of BatchNormalization. On Keras 3, the Keras 2
arguments it dropped (`renorm`, `renorm_clipping`, `renorm_momentum`, `virtual_batch_size`,
`adjustment`) are accepted too, so Horovod-era code builds: at their Keras 2 defaults they
mean what Keras 3 does; other values are ignored with a warning, once.
"""

import warnings

import tensorflow as tf

from tfring import collectives
from tfring.keras._tf_keras import legacy_keras_active


def global_moments(inputs, axes, weights=None):
    """(mean, variance) over `axes` of every rank's `inputs` together (the ranks' batches
    concatenated); `weights` (broadcastable to inputs, e.g. a mask) weigh the elements."""
    x = tf.convert_to_tensor(inputs)
    if weights is None:
        weights = tf.ones_like(x)
    w = tf.broadcast_to(tf.cast(weights, x.dtype), tf.shape(x))
    count = tf.reduce_sum(w, axes)
    local_mean = tf.math.divide_no_nan(tf.reduce_sum(x * w, axes), count)
    deviations = tf.reduce_sum(tf.square(x - _expand(local_mean, axes, x)) * w, axes)
    count64, mean64 = tf.cast(count, tf.float64), tf.cast(local_mean, tf.float64)
    total, first, second = collectives.grouped_allreduce(
        [count64, count64 * mean64, tf.cast(deviations, tf.float64) + count64 * mean64 ** 2],
        op=collectives.Sum)
    mean = tf.math.divide_no_nan(first, total)
    variance = tf.maximum(tf.math.divide_no_nan(second, total) - mean ** 2, 0.0)
    return tf.cast(mean, x.dtype), tf.cast(variance, x.dtype)


def _expand(reduced, axes, like):
    """`reduced` (axes removed) reshaped to broadcast against `like`."""
    for axis in sorted(a % like.shape.rank for a in axes):
        reduced = tf.expand_dims(reduced, axis)
    return reduced


# Keras 2 BatchNormalization arguments that Keras 3's has not, with their Keras 2 defaults.
_KERAS2_ONLY = {"renorm": False, "renorm_clipping": None, "renorm_momentum": 0.99,
                "virtual_batch_size": None, "adjustment": None}
_warned_keras2_only = []


def _drop_keras2_only(kwargs):
    """Removes the Keras-2-only arguments from `kwargs`; warns once where one would have
    changed what Keras 2's layer did."""
    ignored = {k: kwargs.pop(k) for k in list(kwargs) if k in _KERAS2_ONLY}
    changed = sorted(k for k, v in ignored.items() if v != _KERAS2_ONLY[k])
    if changed and not _warned_keras2_only:
        _warned_keras2_only.append(True)
        warnings.warn(f"SyncBatchNormalization on Keras 3 ignores {', '.join(changed)}: Keras "
                      "3's BatchNormalization has no such feature (Keras 2 only).",
                      stacklevel=3)


def _check_fused(fused):
    if fused in (True, None):
        raise ValueError("SyncBatchNormalization does not support fused=True (nor None): a "
                         "fused kernel cannot synchronize its statistics over ranks.")


def _moments_of(inputs, axes, mask):
    """The global moments, where a mask (batch, time) weighs each step's features."""
    weights = None if mask is None else tf.expand_dims(tf.cast(mask, inputs.dtype), -1)
    return global_moments(inputs, axes, weights)


if legacy_keras_active():
    from tfring._adapters import tf_keras as _hooks

    def _tf_keras_moments(inputs, reduction_axes, keep_dims, mask=None):
        mean, variance = _moments_of(inputs, reduction_axes, mask)
        if keep_dims:
            mean = _expand(mean, reduction_axes, inputs)
            variance = _expand(variance, reduction_axes, inputs)
        return mean, variance

    class SyncBatchNormalization(_hooks.batch_norm_with_moments(_tf_keras_moments)):
        """Batch normalization over the global batch of every rank (tf_keras)."""

        def __init__(self, fused=False, **kwargs):
            _check_fused(fused)
            kwargs.setdefault("name", "sync_batch_normalization")
            super().__init__(fused=False, **kwargs)
else:
    import keras as _keras

    from tfring._adapters import keras3 as _hooks

    @_keras.saving.register_keras_serializable(package="tfring")
    class SyncBatchNormalization(_hooks.batch_norm_with_moments(_moments_of)):
        """Batch normalization over the global batch of every rank (Keras 3)."""

        def __init__(self, fused=False, **kwargs):
            _check_fused(fused)
            kwargs.setdefault("name", "sync_batch_normalization")
            kwargs.pop("synchronized", None)  # tf.distribute's sync: tfring does it instead
            _drop_keras2_only(kwargs)
            super().__init__(**kwargs)
