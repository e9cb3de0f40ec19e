"""Gradient compression for allreduce, as ``horovod.torch.Compression``.

``Compression.fp16`` sends floating-point tensors as float16 (half the bytes on the wire) and casts
the result back; ``Compression.bf16`` the same as bfloat16 (float32's range, fewer digits: no
overflow for large gradients); other dtypes pass unchanged. ``Compression.none`` does nothing.
"""

import torch

from ringrun.common.compression import Compressor, NoneCompressor  # noqa: F401


class _CastCompressor(Compressor):
    """Sends floating-point tensors as `wire`; the result comes back in the original dtype."""

    wire = None

    @classmethod
    def compress(cls, tensor):
        dtype = tensor.dtype
        if dtype.is_floating_point and dtype != cls.wire:
            return tensor.type(cls.wire), dtype
        return tensor, dtype

    @staticmethod
    def decompress(tensor, ctx):
        if ctx is not None and ctx.is_floating_point and tensor.dtype != ctx:
            return tensor.type(ctx)
        return tensor


class FP16Compressor(_CastCompressor):
    """Sends floating-point tensors as float16; the result comes back in the original dtype."""

    wire = torch.float16


class BF16Compressor(_CastCompressor):
    """Sends floating-point tensors as bfloat16; the result comes back in the original dtype."""

    wire = torch.bfloat16


class Compression:
    """The compressors to pass as ``compression=``: ``Compression.none``, ``Compression.fp16``,
    ``Compression.bf16``."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
