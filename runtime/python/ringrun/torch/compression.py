"""Gradient compression for allreduce, as ``horovod.torch.Compression``.

``Compression.fp16`` sends floating-point tensors as float16 (half the bytes on the wire) and casts
the result back; other dtypes pass unchanged. ``Compression.none`` does nothing.
"""

import torch

from ringrun.common.compression import Compressor, NoneCompressor  # noqa: F401


class FP16Compressor(Compressor):
    """Sends floating-point tensors as float16; the result comes back in the original dtype."""

    @staticmethod
    def compress(tensor):
        dtype = tensor.dtype
        if dtype.is_floating_point and dtype != torch.float16:
            return tensor.type(torch.float16), dtype
        return tensor, dtype

    @staticmethod
    def decompress(tensor, ctx):
        if ctx is not None and ctx.is_floating_point and tensor.dtype != ctx:
            return tensor.type(ctx)
        return tensor


class Compression:
    """The compressors to pass as ``compression=``: ``Compression.none``, ``Compression.fp16``."""

    none = NoneCompressor
    fp16 = FP16Compressor
