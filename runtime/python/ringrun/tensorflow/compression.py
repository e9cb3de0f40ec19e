"""Gradient compression for allreduce, as ``horovod.tensorflow.Compression``.

``Compression.fp16`` sends floating-point tensors as float16 (half the bytes on the wire) and casts
the result back; other dtypes pass unchanged. ``Compression.none`` does nothing.
"""

import tensorflow as tf

from ringrun.common.compression import Compressor, NoneCompressor  # noqa: F401


class FP16Compressor(Compressor):
    """Sends floating-point tensors as float16; the result comes back in the original dtype."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating and tensor.dtype != tf.float16:
            return tf.cast(tensor, tf.float16), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        if ctx is not None and ctx.is_floating and tensor.dtype != ctx:
            return tf.cast(tensor, ctx)
        return tensor


class Compression:
    """The compressors to pass as ``compression=``: ``Compression.none``, ``Compression.fp16``."""

    none = NoneCompressor
    fp16 = FP16Compressor
