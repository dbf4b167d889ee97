"""Gradient compression for the wire, Horovod's `Compression.none` and `Compression.fp16`.

A compressor turns a tensor into what is sent and back: `compress(t) -> (sent, ctx)`,
`decompress(received, ctx) -> t`. fp16 halves the bytes of float32/float64 gradients at the
cost of precision; other dtypes pass through unchanged.
"""

import tensorflow as tf


class Compressor:
    """The interface of a compressor (Horovod's base class): subclass it for your own."""

    @staticmethod
    def compress(tensor):
        """Returns (what is sent, the context decompress needs)."""
        raise NotImplementedError("Compressor.compress")

    @staticmethod
    def decompress(tensor, ctx):
        """Returns the tensor rebuilt from what was received and the context."""
        raise NotImplementedError("Compressor.decompress")


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Casts floating-point tensors to float16 for the wire and back to their dtype."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating and tensor.dtype != tf.float16:
            return tf.cast(tensor, tf.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tf.cast(tensor, ctx) if ctx is not None else tensor


class Compression:
    """The compressors, by Horovod's names."""

    none = NoneCompressor
    fp16 = FP16Compressor
