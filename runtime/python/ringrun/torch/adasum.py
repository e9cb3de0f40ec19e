"""The tensors an ``op=hvd.Adasum`` allreduce can take, and CUDA tensors' way through host memory.

Adasum combines whole tensors, not elements: two ranks' tensors a and b become
``(1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b``, pair by pair up a binary tree of the ranks (so
orthogonal tensors add up and equal ones stay as they are). The runtime runs it on float16,
bfloat16, float32 and float64 tensors in host memory, on any number of ranks (ringrun(3),
RINGRUN_ADASUM). CUDA tensors are copied to the host and the result back, as Horovod's Adasum
does for GPU tensors without NCCL; Horovod's NCCL build instead averages within each host and
runs Adasum between hosts only.
"""

import torch

_ADASUM_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def host_buffers(tensor, output, what):
    """The (input, output) an Adasum allreduce of ``tensor`` into ``output`` runs on, and the
    CUDA tensor its result must be copied back to (None for CPU tensors, which run as they are).

    ``output is tensor`` means in place, and stays so on the host copies. Raises
    NotImplementedError (a RuntimeError, as Horovod's failure is) for a dtype Adasum cannot
    combine, on every rank that passes it.
    """
    if tensor.dtype not in _ADASUM_DTYPES:
        raise NotImplementedError(f"{what}: op=Adasum combines floating-point tensors (float16, bfloat16, "
                                  f"float32, float64), not {tensor.dtype}; cast the tensor (tensor.float()) or "
                                  "use op=Sum or Average")
    if tensor.device.type != "cuda":
        return tensor, output, None
    host = tensor.detach().to("cpu", memory_format=torch.contiguous_format)
    if output is tensor:
        return host, host, tensor
    return host, torch.empty_like(host), output
