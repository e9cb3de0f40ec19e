"""What the bindings' ``Compression`` share: the compressor interface and the one that does
nothing. Each binding adds its float16 compressor (``ringrun.torch.compression``,
``ringrun.tensorflow.compression``)."""


class Compressor:
    """Compresses a tensor before an allreduce and restores it after."""

    @staticmethod
    def compress(tensor):
        """Returns (compressed tensor, context for decompress)."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        """Returns the tensor restored with the context that compress returned."""
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor
