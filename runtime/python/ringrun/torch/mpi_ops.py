"""The collectives of ``horovod.torch.mpi_ops`` on ringrun's runtime, and the allreduce family.

Every op is keyed by its name: ranks may submit named ops in any order, the runtime's engine runs
them in one agreed order everywhere (small ones fused into one buffer). Unnamed ops are numbered in
call order on each rank. Tensors must have the same shape and dtype on every rank for a name, or
every rank raises InternalError naming the tensor and the ranks.
"""

import torch

from ringrun import _ringrun
from ringrun.torch.basics import (  # noqa: F401 - re-exported as horovod.torch.mpi_ops does
    Adasum, Average, HorovodInternalError, InternalError, Max, Min, Product, Sum, cross_rank,
    cross_size, cuda_built, global_process_set, gloo_built, gloo_enabled, init, is_homogeneous,
    is_initialized, local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built,
    poll, rank, rocm_built, shutdown, size, synchronize)
from ringrun.torch.basics import (_add_pending, _auto_name, _check_dense, _check_process_set, _check_tensor,
                                  _completed, _op_code)
from ringrun.torch import adasum
from ringrun.torch.compression import Compression
from ringrun.torch.gather_ops import (  # noqa: F401
    allgather, allgather_async, alltoall, alltoall_async, barrier, broadcast, broadcast_, broadcast_async,
    broadcast_async_, join, reducescatter, reducescatter_async)


def _scaled(buffer, factor):
    if factor != 1.0:
        if not buffer.dtype.is_floating_point:
            raise ValueError(f"allreduce: prescale/postscale factors need a floating-point tensor, not {buffer.dtype}")
        buffer.mul_(factor)
    return buffer


def _submit_allreduce(tensor, output, name, op, prescale_factor, postscale_factor, what):
    """Submits tensor -> output (the same tensor: in place); returns (C handle, finish)."""
    device_output = None
    if op == Adasum:  # float dtypes only; CUDA tensors through host memory
        tensor, output, device_output = adasum.host_buffers(tensor, output, what)
    code = _check_tensor(tensor, what)
    source = tensor.contiguous()
    if prescale_factor != 1.0:
        source = _scaled(source.clone() if output is not tensor else source, prescale_factor)
    target = output if output.is_contiguous() else torch.empty_like(output, memory_format=torch.contiguous_format)
    if output is tensor and target is not output:
        source = target.copy_(source)  # in place on a contiguous copy, written back when done
    elif output is tensor:
        source = target
    handle = _ringrun.allreduce_async(name, source.data_ptr(), target.data_ptr(), tensor.numel(), code, op)

    def finish():
        _scaled(target, postscale_factor)
        if target is not output:
            output.copy_(target)
        return output if device_output is None else device_output.copy_(output)

    return handle, (source, target), finish


def _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, what):
    name = _auto_name("allreduce", name)
    handle, keep, finish = _submit_allreduce(tensor, output, name, op, prescale_factor, postscale_factor, what)
    return _add_pending((handle,), keep, finish)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Starts an allreduce of ``tensor`` into a new tensor; returns a handle for poll()/synchronize().

    ``op`` is Average (the default), Sum, Min, Max, Product or Adasum (ringrun/torch/adasum.py);
    ``prescale_factor`` multiplies the input before the reduction and ``postscale_factor`` the
    result. The input is not modified.
    """
    _check_process_set(process_set, "allreduce_async")
    op = _op_code(op, average, "allreduce_async")
    output = torch.empty_like(_check_dense(tensor, "allreduce_async"), memory_format=torch.contiguous_format)
    return _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, "allreduce_async")


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """Starts an in-place allreduce of ``tensor``; returns a handle for poll()/synchronize()."""
    _check_process_set(process_set, "allreduce_async_")
    op = _op_code(op, average, "allreduce_async_")
    return _allreduce_async(tensor, tensor, name, op, prescale_factor, postscale_factor, "allreduce_async_")


def _allreduce_now(tensor, output, op, prescale_factor, postscale_factor, what):
    """One synchronous call, no handle: the short path for a tensor that needs no autograd."""
    if op == Adasum:  # checked, and staged from CUDA, on the submitted path
        return synchronize(_allreduce_async(tensor, output, None, op, prescale_factor, postscale_factor, what))
    code = _check_tensor(tensor, what)
    if prescale_factor != 1.0 or not tensor.is_contiguous() or not output.is_contiguous():
        return synchronize(_allreduce_async(tensor, output, None, op, prescale_factor, postscale_factor, what))
    _ringrun.allreduce(tensor.data_ptr(), output.data_ptr(), tensor.numel(), code, op)
    return _scaled(output, postscale_factor)


class _Allreduce(torch.autograd.Function):
    """Allreduce whose gradient is the allreduce (same op and factors) of the output's gradient."""

    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor):
        ctx.op, ctx.prescale_factor, ctx.postscale_factor = op, prescale_factor, postscale_factor
        output = torch.empty_like(tensor, memory_format=torch.contiguous_format)
        if name is None:  # the same call as without autograd, whether a rank's tensor requires grad or not
            return _allreduce_now(tensor, output, op, prescale_factor, postscale_factor, "allreduce")
        return synchronize(_allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, "allreduce"))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=ctx.op, prescale_factor=ctx.prescale_factor,
                         postscale_factor=ctx.postscale_factor)
        return grad, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """Returns the allreduce of ``tensor`` over all ranks (Average by default); the input is not modified.

    Differentiable: the gradient flows back through an allreduce. ``compression=Compression.fp16``
    sends floating-point tensors as float16.
    """
    _check_process_set(process_set, "allreduce")
    op = _op_code(op, average, "allreduce")
    compressed, ctx = compression.compress(_check_dense(tensor, "allreduce"))
    if name is None and not (torch.is_grad_enabled() and compressed.requires_grad):
        output = torch.empty_like(compressed, memory_format=torch.contiguous_format)
        reduced = _allreduce_now(compressed, output, op, prescale_factor, postscale_factor, "allreduce")
    else:
        reduced = _Allreduce.apply(compressed, name, op, prescale_factor, postscale_factor)
    return compression.decompress(reduced, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """Allreduces ``tensor`` in place over all ranks (Average by default) and returns it."""
    _check_process_set(process_set, "allreduce_")
    op = _op_code(op, average, "allreduce_")
    if name is None:
        return _allreduce_now(tensor, tensor, op, prescale_factor, postscale_factor, "allreduce_")
    return synchronize(_allreduce_async(tensor, tensor, name, op, prescale_factor, postscale_factor, "allreduce_"))


def _grouped_async(tensors, outputs, name, op, prescale_factor, postscale_factor, what):
    """One handle for a list of allreduces submitted together (the engine fuses them)."""
    if not tensors:
        return _completed([])
    base = _auto_name("grouped_allreduce", name)
    handles, keeps, finishes = [], [], []
    for i, (tensor, output) in enumerate(zip(tensors, outputs)):
        handle, keep, finish = _submit_allreduce(tensor, output, f"{base}.{i}", op, prescale_factor,
                                                 postscale_factor, what)
        handles.append(handle)
        keeps.append(keep)
        finishes.append(finish)
    return _add_pending(tuple(handles), keeps, lambda: [finish() for finish in finishes])


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set):
    """Starts allreduces of a list of tensors as one group; synchronize() returns the list of results."""
    _check_process_set(process_set, "grouped_allreduce_async")
    op = _op_code(op, average, "grouped_allreduce_async")
    outputs = [torch.empty_like(_check_dense(t, "grouped_allreduce_async"), memory_format=torch.contiguous_format) for t in tensors]
    return _grouped_async(tensors, outputs, name, op, prescale_factor, postscale_factor, "grouped_allreduce_async")


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                             process_set=global_process_set):
    """Starts in-place allreduces of a list of tensors as one group."""
    _check_process_set(process_set, "grouped_allreduce_async_")
    op = _op_code(op, average, "grouped_allreduce_async_")
    return _grouped_async(tensors, tensors, name, op, prescale_factor, postscale_factor, "grouped_allreduce_async_")


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set):
    """Returns the allreduces of a list of tensors, reduced as one group (not differentiable)."""
    compressed = [compression.compress(t) for t in tensors]
    handle = grouped_allreduce_async([c for c, _ in compressed], average, name, op, prescale_factor, postscale_factor,
                                     process_set)
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(synchronize(handle), compressed)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    """Allreduces a list of tensors in place, as one group, and returns them."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))
