"""Allgather, broadcast, alltoall, reducescatter (single and grouped), join and barrier, as
horovod.torch names them.

Each is one native collective of the engine: an allgather whose first dimension differs per rank
learns every rank's count in the negotiation and fills an output it sizes then (no size exchange
before it, no padding); alltoall moves each rank's rows straight to their rank; reducescatter
leaves each rank its own rows of the reduction (half the bytes of an allreduce). Roots are global
ranks, also within a process set, as in Horovod.
"""

import torch

from ringrun import _ringrun
from ringrun.common.basics import _root_index
from ringrun.torch.basics import (Average, Sum, _add_group, _add_pending, _check_dense, _completed, _op_code,
                                  _set_size, global_process_set, rank, synchronize)
from ringrun.torch.compression import Compression
from ringrun.torch.reduce_ops import allreduce, grouped_allreduce
from ringrun.torch.submission import output_tensor, scale, submit

# Public: ringrun.torch and ringrun.torch.mpi_ops export these (mpi_ops.__all__).
__all__ = ['allgather', 'allgather_async', 'alltoall', 'alltoall_async', 'barrier', 'broadcast', 'broadcast_',
           'broadcast_async', 'broadcast_async_', 'grouped_allgather', 'grouped_allgather_async',
           'grouped_reducescatter', 'grouped_reducescatter_async', 'join', 'reducescatter', 'reducescatter_async']


def _row_shape(tensor):
    return tuple(tensor.shape[1:]) if tensor.dim() > 0 else ()


def _set_rank(process_set):
    return rank() if process_set is None or process_set is global_process_set else process_set.rank()


# ---------------------------------------------------------------------------------------------
# Allgather

def _submit_allgather(tensor, name, process_set, what):
    """Submits one allgather; returns (C handle, kept, finish)."""
    _check_dense(tensor, what)
    device = tensor.device
    source = tensor.contiguous() if tensor.dim() > 0 else tensor.reshape(1)
    if device.type != "cpu":  # the engine sizes the output in host memory
        source = source.cpu()
    row = _row_shape(source)
    handle, output = submit(_ringrun.ALLGATHER, what, source, name=name, process_set=process_set, variable=True)
    return handle, (source, output), lambda: output_tensor(output, tensor.dtype, row, device)


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts gathering ``tensor`` from every rank of the set, concatenated on the first dimension
    in rank order (the first dimension may differ per rank); returns a handle for synchronize()."""
    handle, keep, finish = _submit_allgather(tensor, name, process_set, "allgather_async")
    return _add_pending((handle,), keep, finish)


class _Allgather(torch.autograd.Function):
    """Allgather whose gradient is this rank's rows of the averaged output gradient (Horovod's)."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.rows = tensor.shape[0] if tensor.dim() > 0 else 1
        ctx.process_set = process_set
        return synchronize(allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        every = allgather(torch.tensor([ctx.rows], dtype=torch.int64), process_set=ctx.process_set)
        me = _set_rank(ctx.process_set)
        offset = int(every[:me].sum()) if me else 0
        return grad.narrow(0, offset, ctx.rows), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Returns ``tensor`` from every rank of the set concatenated on the first dimension in rank
    order; the first dimension may differ per rank, the others must match. Differentiable."""
    return _Allgather.apply(_check_dense(tensor, "allgather"), name, process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Starts allgathers of a list of tensors as one group; synchronize() returns the list."""
    tensors = list(tensors)
    if not tensors:
        return _completed([])
    for t in tensors:
        _check_dense(t, "grouped_allgather_async")
    finishes = []

    def parts():
        for i, t in enumerate(tensors):
            handle, keep, finish = _submit_allgather(t, f"{name}.{i}" if name is not None else None, process_set,
                                                     "grouped_allgather_async")
            finishes.append(finish)
            yield handle, keep

    return _add_group(parts, lambda: [f() for f in finishes])


class _GroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.rows = [t.shape[0] if t.dim() > 0 else 1 for t in tensors]
        ctx.process_set = process_set
        return tuple(synchronize(grouped_allgather_async(list(tensors), name, process_set)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        grads = grouped_allreduce(list(grad_outputs), op=Average, process_set=ctx.process_set)
        rows = [torch.tensor([r], dtype=torch.int64) for r in ctx.rows]
        every = grouped_allgather(rows, process_set=ctx.process_set)
        me = _set_rank(ctx.process_set)
        result = []
        for grad, counts, mine in zip(grads, every, ctx.rows):
            offset = int(counts[:me].sum()) if me else 0
            result.append(grad.narrow(0, offset, mine))
        return (None, None, *result)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Returns the allgathers of a list of tensors, gathered as one group. Differentiable."""
    tensors = [_check_dense(t, "grouped_allgather") for t in tensors]
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return list(_GroupedAllgather.apply(name, process_set, *tensors))
    return synchronize(grouped_allgather_async(tensors, name, process_set))


# ---------------------------------------------------------------------------------------------
# Broadcast

def _root_in_set(root_rank, process_set, what):
    """The root's index in the set (roots are global ranks); ValueError when it is not a member."""
    if not isinstance(root_rank, int) or isinstance(root_rank, bool):
        raise ValueError(f"{what}: root_rank must be an int, got {root_rank!r}")
    if process_set is None or process_set is global_process_set:
        if not 0 <= root_rank < _set_size(process_set):
            raise ValueError(f"{what}: root_rank {root_rank} is not a rank of this job (0..{_set_size(process_set) - 1})")
        return root_rank
    return _root_index(root_rank, process_set, what)


def _broadcast_async(tensor, output, root_rank, name, process_set, what):
    _check_dense(tensor, what)
    root = _root_in_set(root_rank, process_set, what)
    buffer = output if output.is_contiguous() else tensor.contiguous().clone()
    if buffer is not tensor:
        buffer.copy_(tensor)
    handle, _ = submit(_ringrun.BROADCAST, what, buffer, buffer, name, root=root, process_set=process_set)

    def finish():
        if buffer is not output:
            output.copy_(buffer)
        return output

    return _add_pending((handle,), (tensor, buffer), finish)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts broadcasting ``tensor`` of ``root_rank`` (a global rank) into a new tensor on every
    rank of the set."""
    output = torch.empty_like(_check_dense(tensor, "broadcast_async"), memory_format=torch.contiguous_format)
    return _broadcast_async(tensor, output, root_rank, name, process_set, "broadcast_async")


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts broadcasting ``tensor`` of ``root_rank`` into ``tensor`` on every other rank of the set."""
    return _broadcast_async(tensor, tensor, root_rank, name, process_set, "broadcast_async_")


class _Broadcast(torch.autograd.Function):
    """Broadcast whose gradient is the averaged gradient on the root rank and zero elsewhere."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        if rank() != ctx.root_rank:
            grad = grad * 0
        return grad, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns ``tensor`` of ``root_rank`` on every rank of the set; the input is not modified.
    Differentiable."""
    return _Broadcast.apply(_check_dense(tensor, "broadcast"), root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrites ``tensor`` with ``root_rank``'s on every rank of the set and returns it."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# ---------------------------------------------------------------------------------------------
# Alltoall

def _splits_list(splits, rows, set_size, what):
    if splits is None:
        if rows % set_size:
            raise ValueError(f"{what}: without splits the first dimension ({rows}) must divide evenly by the number "
                             f"of ranks ({set_size}); pass splits")
        return None
    if isinstance(splits, torch.Tensor):
        if splits.dtype.is_floating_point or splits.dtype == torch.bool:
            raise ValueError(f"{what}: splits must be integers, got a {splits.dtype} tensor")
        splits = splits.tolist()
    splits = [int(s) for s in splits]
    if len(splits) != set_size or any(s < 0 for s in splits) or sum(splits) != rows:
        raise ValueError(f"{what}: splits {splits} must hold one non-negative count per rank ({set_size}) adding up "
                         f"to the first dimension ({rows})")
    return splits


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts an alltoall: rank r receives the ``splits[r]`` rows of every rank's tensor meant for
    it (evenly split without splits). synchronize() returns (output, received_splits)."""
    _check_dense(tensor, "alltoall_async")
    if tensor.dim() == 0:
        raise ValueError("alltoall_async: the tensor needs at least one dimension")
    splits = _splits_list(splits, tensor.shape[0], _set_size(process_set), "alltoall_async")
    device = tensor.device
    source = tensor.contiguous() if device.type == "cpu" else tensor.contiguous().cpu()
    row = _row_shape(source)
    handle, output = submit(_ringrun.ALLTOALL, "alltoall_async", source, name=name, process_set=process_set,
                            splits=splits, variable=True)

    def finish():
        return output_tensor(output, tensor.dtype, row, device), torch.tensor(output.rows, dtype=torch.int32)

    return _add_pending((handle,), (source, output), finish)


class _Alltoall(torch.autograd.Function):
    """Alltoall whose gradient is the alltoall of the output's gradient back, by received splits."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.process_set = process_set
        ctx.received = received
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad_output, *ignored):
        grad, _ = synchronize(alltoall_async(grad_output.contiguous(), ctx.received, None, ctx.process_set))
        return grad, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Scatters the rows of ``tensor`` to the ranks of the set (``splits[r]`` rows to rank r,
    evenly when no splits are given) and gathers what every rank sent here, in rank order.
    Returns the output, and with ``splits`` also the rows received from each rank. Differentiable."""
    output, received = _Alltoall.apply(_check_dense(tensor, "alltoall"), splits, name, process_set)
    return output if splits is None else (output, received)


# ---------------------------------------------------------------------------------------------
# Reducescatter

def _reducescatter_op(op, what):
    op = _op_code(op, None, what)
    if op not in (Average, Sum):
        raise ValueError(f"{what}: op must be Average or Sum")
    return op


def _my_rows(rows, process_set):
    n, me = _set_size(process_set), _set_rank(process_set)
    base, extra = divmod(rows, n)
    return base + (1 if me < extra else 0)


def _submit_reducescatter(tensor, name, op, process_set, prescale_factor, postscale_factor, what):
    _check_dense(tensor, what)
    if tensor.dim() == 0:
        raise ValueError(f"{what}: the tensor needs at least one dimension (got a scalar)")
    source = tensor.contiguous()
    if prescale_factor != 1.0:
        source = scale(source.clone() if source is tensor else source, prescale_factor)
    output = torch.empty((_my_rows(tensor.shape[0], process_set),) + _row_shape(tensor), dtype=tensor.dtype,
                         device=tensor.device)
    handle, _ = submit(_ringrun.REDUCESCATTER, what, source, output, name, op=op, process_set=process_set)
    return handle, (source, output), lambda: scale(output, postscale_factor)


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Starts a reducescatter: the reduction of ``tensor`` over the set, of which each rank keeps
    its share of the first dimension (rows/size, the first ranks one row more when it does not
    divide)."""
    op = _reducescatter_op(op, "reducescatter_async")
    handle, keep, finish = _submit_reducescatter(tensor, name, op, process_set, prescale_factor, postscale_factor,
                                                 "reducescatter_async")
    return _add_pending((handle,), keep, finish)


class _Reducescatter(torch.autograd.Function):
    """Reducescatter whose gradient is the allgather of the output's gradient (scaled as Horovod)."""

    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.op, ctx.process_set = op, process_set
        ctx.factor = prescale_factor * postscale_factor
        return synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor, postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        grad = grad_output * _set_size(ctx.process_set) if ctx.op == Sum else grad_output
        if ctx.factor != 1.0:
            grad = grad * ctx.factor
        return allgather(grad, process_set=ctx.process_set), None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Returns this rank's share (split on the first dimension) of the reduction of ``tensor``
    over the set. Differentiable."""
    op = _reducescatter_op(op, "reducescatter")
    compressed, ctx = compression.compress(_check_dense(tensor, "reducescatter"))
    result = _Reducescatter.apply(compressed, name, op, process_set, prescale_factor, postscale_factor)
    return compression.decompress(result, ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                                postscale_factor=1.0):
    """Starts reducescatters of a list of tensors as one group; synchronize() returns the list."""
    op = _reducescatter_op(op, "grouped_reducescatter_async")
    tensors = list(tensors)
    if not tensors:
        return _completed([])
    for t in tensors:  # every tensor checked before any is queued
        if _check_dense(t, "grouped_reducescatter_async").dim() == 0:
            raise ValueError("grouped_reducescatter_async: every tensor needs at least one dimension (got a scalar)")
    finishes = []

    def parts():
        for i, t in enumerate(tensors):
            handle, keep, finish = _submit_reducescatter(t, f"{name}.{i}" if name is not None else None, op, process_set,
                                                         prescale_factor, postscale_factor, "grouped_reducescatter_async")
            finishes.append(finish)
            yield handle, keep

    return _add_group(parts, lambda: [f() for f in finishes])


class _GroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.op, ctx.process_set = op, process_set
        ctx.factor = prescale_factor * postscale_factor
        return tuple(synchronize(grouped_reducescatter_async(list(tensors), name, op, process_set, prescale_factor,
                                                             postscale_factor)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        grads = [g * _set_size(ctx.process_set) if ctx.op == Sum else g for g in grad_outputs]
        if ctx.factor != 1.0:
            grads = [g * ctx.factor for g in grads]
        return (None, None, None, None, None, *grouped_allgather(grads, process_set=ctx.process_set))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Returns this rank's shares of the reductions of a list of tensors, as one group. Differentiable."""
    op = _reducescatter_op(op, "grouped_reducescatter")
    compressed = [compression.compress(_check_dense(t, "grouped_reducescatter")) for t in tensors]
    results = _GroupedReducescatter.apply(name, op, process_set, prescale_factor, postscale_factor,
                                          *[c for c, _ in compressed])
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(results, compressed)]


# ---------------------------------------------------------------------------------------------
# Barrier and join

def barrier(process_set=global_process_set):
    """Returns once every rank of the set has called barrier()."""
    handle, _ = submit(_ringrun.BARRIER, "barrier", torch.empty(0), process_set=process_set, automatic_name=True)
    synchronize(_add_pending((handle,), None, lambda: None))


def join(device=-1):
    """Tells the other ranks that this rank has no more data, and returns once every rank has
    called join(), with the rank that called it last (the same on every rank).

    Until then this rank takes part in the allreduces the others still run, with zeros (the
    identity of Min, Max and Product for those ops), as Horovod's join does, so ranks with fewer
    batches than others do not hang them. Allgather, broadcast, alltoall and reducescatter cannot
    stand in for a joined rank: the other ranks' ones raise InternalError. ``device`` is Horovod's
    (where to make the stand-in tensors) and is not needed here.
    """
    return _ringrun.join()
