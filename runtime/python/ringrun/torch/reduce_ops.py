"""The allreduce family of ``horovod.torch``: allreduce and grouped allreduce, async and in place.

Every op is keyed by its name: ranks may submit named ops in any order, the runtime's engine runs
them in one agreed order everywhere (small ones fused into one buffer). Unnamed ops are numbered in
call order on each rank. Tensors must have the same shape and dtype on every rank of the op's
process set for a name, or every rank raises InternalError naming the tensor, the ranks and their
shapes.
"""

import torch

from ringrun import _ringrun
from ringrun.torch import adasum
from ringrun.torch.basics import (_DTYPES, Adasum, _add_group, _add_pending, _check_dense, _completed, _op_code, _set_id,
                                  global_process_set, synchronize)
from ringrun.torch.compression import Compression
from ringrun.torch.submission import scale, submit, submit_checked

# Public: ringrun.torch and ringrun.torch.mpi_ops export these (mpi_ops.__all__).
__all__ = ['allreduce', 'allreduce_', 'allreduce_async', 'allreduce_async_', 'grouped_allreduce', 'grouped_allreduce_',
           'grouped_allreduce_async', 'grouped_allreduce_async_']


def _submit_allreduce(tensor, output, name, op, prescale_factor, postscale_factor, process_set, what):
    """Submits tensor -> output (the same tensor: in place); returns (C handle, kept, finish)."""
    device_output = None
    if op == Adasum:  # float dtypes only; CUDA tensors through host memory
        tensor, output, device_output = adasum.host_buffers(tensor, output, what)
    target = output if output.is_contiguous() else torch.empty_like(output, memory_format=torch.contiguous_format)
    if output is tensor:  # in place, on a contiguous copy when the tensor is not (written back after)
        if target is not tensor:
            target.copy_(tensor)
        source = scale(target, prescale_factor)
    else:
        source = tensor.contiguous()
        if prescale_factor != 1.0:
            source = scale(source.clone() if source is tensor else source, prescale_factor)
    handle, _ = submit(_ringrun.ALLREDUCE, what, source, target, name, op=op, process_set=process_set)

    def finish():
        scale(target, postscale_factor)
        if target is not output:
            output.copy_(target)
        return output if device_output is None else device_output.copy_(output)

    return handle, (source, target), finish


def gradient_allreduce_async_(tensor, engine_name, op, process_set):
    """The DistributedOptimizer's per-gradient submission: an in-place allreduce of a contiguous
    dense CPU tensor without scaling, under the engine name made once per parameter (op_name).
    It runs inside backward hooks, once per parameter and step, between the model's kernels, where
    every Python call is cache-cold: the same op as allreduce_async_, without its general steps.
    Returns None when the tensor needs the general path (another device, layout or dtype)."""
    code = _DTYPES.get(tensor.dtype)
    if code is None or not tensor.is_cpu or tensor.is_sparse or not tensor.is_contiguous():
        return None
    handle, _ = submit_checked(_ringrun.ALLREDUCE, engine_name, tensor, tensor, code, op, 0,
                               _set_id(process_set, "DistributedOptimizer"))
    return _add_pending((handle,), tensor, lambda: tensor)


def _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, process_set, what):
    handle, keep, finish = _submit_allreduce(tensor, output, name, op, prescale_factor, postscale_factor, process_set,
                                             what)
    return _add_pending((handle,), keep, finish)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Starts an allreduce of ``tensor`` into a new tensor; returns a handle for poll()/synchronize().

    ``op`` is Average (the default), Sum, Min, Max or Product; ``prescale_factor`` multiplies the
    input before the reduction and ``postscale_factor`` the result (integers are scaled in float64
    and truncated back). The input is not modified.
    """
    op = _op_code(op, average, "allreduce_async")
    output = torch.empty_like(_check_dense(tensor, "allreduce_async"), memory_format=torch.contiguous_format)
    return _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, process_set,
                            "allreduce_async")


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """Starts an in-place allreduce of ``tensor``; returns a handle for poll()/synchronize()."""
    op = _op_code(op, average, "allreduce_async_")
    return _allreduce_async(_check_dense(tensor, "allreduce_async_"), tensor, name, op, prescale_factor,
                            postscale_factor, process_set, "allreduce_async_")


def _allreduce_now(tensor, output, op, prescale_factor, postscale_factor, process_set, what):
    """A call waited for at once: named by the runtime's rotation (a response-cache hit from the
    second call on, so small tensors ride in the negotiation)."""
    if op == Adasum or prescale_factor != 1.0 or not tensor.is_contiguous() or not output.is_contiguous():
        return synchronize(_allreduce_async(tensor, output, None, op, prescale_factor, postscale_factor, process_set,
                                            what))
    handle, _ = submit(_ringrun.ALLREDUCE, what, tensor, output, op=op, process_set=process_set, automatic_name=True)
    synchronize(_add_pending((handle,), (tensor, output), lambda: output))
    return scale(output, postscale_factor)


class _Allreduce(torch.autograd.Function):
    """Allreduce whose gradient is the allreduce (same op, factors and set) of the output's gradient."""

    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set):
        ctx.op, ctx.prescale_factor, ctx.postscale_factor = op, prescale_factor, postscale_factor
        ctx.process_set = process_set
        output = torch.empty_like(tensor, memory_format=torch.contiguous_format)
        if name is None:  # the same call as without autograd, whether a rank's tensor requires grad or not
            return _allreduce_now(tensor, output, op, prescale_factor, postscale_factor, process_set, "allreduce")
        return synchronize(_allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, process_set,
                                            "allreduce"))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=ctx.op, prescale_factor=ctx.prescale_factor,
                         postscale_factor=ctx.postscale_factor, process_set=ctx.process_set)
        return grad, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """Returns the allreduce of ``tensor`` over the ranks of ``process_set`` (every rank by
    default; Average by default); the input is not modified.

    Differentiable: the gradient flows back through an allreduce. ``compression=Compression.fp16``
    (or ``bf16``) sends floating-point tensors as 16-bit floats.
    """
    op = _op_code(op, average, "allreduce")
    compressed, ctx = compression.compress(_check_dense(tensor, "allreduce"))
    if name is None and not (torch.is_grad_enabled() and compressed.requires_grad):
        output = torch.empty_like(compressed, memory_format=torch.contiguous_format)
        reduced = _allreduce_now(compressed, output, op, prescale_factor, postscale_factor, process_set, "allreduce")
    else:
        reduced = _Allreduce.apply(compressed, name, op, prescale_factor, postscale_factor, process_set)
    return compression.decompress(reduced, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """Allreduces ``tensor`` in place over the ranks of ``process_set`` (Average by default) and returns it."""
    op = _op_code(op, average, "allreduce_")
    _check_dense(tensor, "allreduce_")
    if name is None:
        return _allreduce_now(tensor, tensor, op, prescale_factor, postscale_factor, process_set, "allreduce_")
    return synchronize(_allreduce_async(tensor, tensor, name, op, prescale_factor, postscale_factor, process_set,
                                        "allreduce_"))


def _grouped_async(tensors, outputs, name, op, prescale_factor, postscale_factor, process_set, what):
    """One handle for a list of allreduces submitted together (the engine fuses them)."""
    tensors = list(tensors)
    if not tensors:
        return _completed([])
    finishes = []

    def parts():
        for i, (tensor, output) in enumerate(zip(tensors, outputs)):
            part = f"{name}.{i}" if name is not None else None
            handle, keep, finish = _submit_allreduce(_check_dense(tensor, what), output, part, op, prescale_factor,
                                                     postscale_factor, process_set, what)
            finishes.append(finish)
            yield handle, keep

    return _add_group(parts, lambda: [finish() for finish in finishes])


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set):
    """Starts allreduces of a list of tensors as one group; synchronize() returns the list of results."""
    op = _op_code(op, average, "grouped_allreduce_async")
    outputs = [torch.empty_like(_check_dense(t, "grouped_allreduce_async"), memory_format=torch.contiguous_format)
               for t in tensors]
    return _grouped_async(tensors, outputs, name, op, prescale_factor, postscale_factor, process_set,
                          "grouped_allreduce_async")


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                             process_set=global_process_set):
    """Starts in-place allreduces of a list of tensors as one group."""
    op = _op_code(op, average, "grouped_allreduce_async_")
    return _grouped_async(tensors, tensors, name, op, prescale_factor, postscale_factor, process_set,
                          "grouped_allreduce_async_")


class _GroupedAllreduce(torch.autograd.Function):
    """Grouped allreduce whose gradients are the grouped allreduce of the outputs' gradients."""

    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.op, ctx.prescale_factor, ctx.postscale_factor = op, prescale_factor, postscale_factor
        ctx.process_set = process_set
        return tuple(synchronize(grouped_allreduce_async(list(tensors), None, name, op, prescale_factor,
                                                         postscale_factor, process_set)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        grads = grouped_allreduce(list(grad_outputs), op=ctx.op, prescale_factor=ctx.prescale_factor,
                                  postscale_factor=ctx.postscale_factor, process_set=ctx.process_set)
        return (None, None, None, None, None, *grads)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set):
    """Returns the allreduces of a list of tensors, reduced as one group. Differentiable."""
    op = _op_code(op, average, "grouped_allreduce")
    compressed = [compression.compress(_check_dense(t, "grouped_allreduce")) for t in tensors]
    inputs = [c for c, _ in compressed]
    if torch.is_grad_enabled() and any(t.requires_grad for t in inputs):
        reduced = _GroupedAllreduce.apply(name, op, prescale_factor, postscale_factor, process_set, *inputs)
    else:
        reduced = synchronize(grouped_allreduce_async(inputs, None, name, op, prescale_factor, postscale_factor,
                                                      process_set))
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(reduced, compressed)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    """Allreduces a list of tensors in place, as one group, and returns them."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))
