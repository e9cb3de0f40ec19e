"""Allgather, broadcast, alltoall, reducescatter, join and barrier, as horovod.torch names them.

Allgather takes a different first dimension on each rank: the ranks first exchange their shapes
(one small allgather), then gather the tensors padded to the largest first dimension through the
engine and drop the padding. Alltoall and reducescatter are built on allgather and allreduce: they
move more bytes than a dedicated algorithm would (alltoall every rank's whole tensor,
reducescatter the whole reduced tensor) and are meant for small and medium tensors.
"""

import time

import torch

from ringrun import _ringrun
from ringrun.torch.basics import (Average, Sum, _add_pending, _auto_name, _check_dense, _check_process_set,
                                  _check_tensor, _completed, _op_code, global_process_set, rank, size,
                                  synchronize)
from ringrun.torch.compression import Compression


def _row_shape(tensor):
    return tuple(tensor.shape[1:]) if tensor.dim() > 0 else ()


def _exchange_shapes(tensor, what):
    """Every rank's first dimension; ValueError on every rank when the other dimensions differ."""
    rows = tensor.shape[0] if tensor.dim() > 0 else 1
    row = _row_shape(tensor)
    mine = torch.tensor([rows, tensor.dim(), hash(row) & 0x7FFFFFFFFFFFFFFF], dtype=torch.int64)
    every = torch.empty(size() * 3, dtype=torch.int64)
    _ringrun.allgather(mine.data_ptr(), 3, _ringrun.INT64, every.data_ptr())
    every = every.view(size(), 3)
    if not bool((every[:, 1:] == every[0, 1:]).all()):
        raise ValueError(f"{what}: tensors must have the same number of dimensions and the same shape beyond the "
                         f"first on every rank; this rank's shape is {tuple(tensor.shape)}")
    return every[:, 0].tolist()


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts gathering ``tensor`` from every rank, concatenated on the first dimension in rank
    order (the first dimension may differ per rank); returns a handle for synchronize()."""
    _check_process_set(process_set, "allgather_async")
    code = _check_tensor(tensor, "allgather_async")
    name = _auto_name("allgather", name)
    counts = _exchange_shapes(tensor, "allgather_async")
    row = _row_shape(tensor)
    largest = max(counts)
    source = tensor.contiguous() if tensor.dim() > 0 else tensor.reshape(1)
    if any(c != largest for c in counts):
        padded = torch.zeros((largest,) + row, dtype=tensor.dtype, device=tensor.device)
        padded[:counts[rank()]] = source
        source = padded
    gathered = torch.empty((largest * size(),) + row, dtype=tensor.dtype, device=tensor.device)
    handle = _ringrun.allgather_async(name, source.data_ptr(), source.numel(), code, gathered.data_ptr())

    def finish():
        if all(c == largest for c in counts):
            return gathered
        return torch.cat([gathered[r * largest:r * largest + c] for r, c in enumerate(counts)])

    return _add_pending((handle,), (source, gathered), finish)


class _Allgather(torch.autograd.Function):
    """Allgather whose gradient is this rank's rows of the summed output gradient."""

    @staticmethod
    def forward(ctx, tensor, name):
        ctx.rows = tensor.shape[0] if tensor.dim() > 0 else 1
        return synchronize(allgather_async(tensor, name))

    @staticmethod
    def backward(ctx, grad_output):
        from ringrun.torch.mpi_ops import allreduce
        grad = allreduce(grad_output, op=Sum)
        rows = torch.tensor([ctx.rows], dtype=torch.int64)
        every = synchronize(allgather_async(rows))
        offset = int(every[:rank()].sum()) if rank() else 0
        return grad.narrow(0, offset, ctx.rows), None


def allgather(tensor, name=None, process_set=global_process_set):
    """Returns ``tensor`` from every rank concatenated on the first dimension in rank order; the
    first dimension may differ per rank, the others must match. Differentiable."""
    _check_process_set(process_set, "allgather")
    return _Allgather.apply(tensor, name)


def _broadcast_async(tensor, output, root_rank, name, what):
    code = _check_tensor(tensor, what)
    if not 0 <= root_rank < size():
        raise ValueError(f"{what}: root_rank {root_rank} is not a rank of this job (0..{size() - 1})")
    name = _auto_name("broadcast", name)
    buffer = output if output.is_contiguous() else tensor.contiguous().clone()
    if buffer is not tensor:
        buffer.copy_(tensor)
    handle = _ringrun.broadcast_async(name, buffer.data_ptr(), buffer.numel(), code, root_rank)

    def finish():
        if buffer is not output:
            output.copy_(buffer)
        return output

    return _add_pending((handle,), (tensor, buffer), finish)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts broadcasting ``tensor`` of ``root_rank`` into a new tensor on every rank."""
    _check_process_set(process_set, "broadcast_async")
    output = torch.empty_like(_check_dense(tensor, "broadcast_async"), memory_format=torch.contiguous_format)
    return _broadcast_async(tensor, output, root_rank, name, "broadcast_async")


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts broadcasting ``tensor`` of ``root_rank`` into ``tensor`` on every other rank."""
    _check_process_set(process_set, "broadcast_async_")
    return _broadcast_async(tensor, tensor, root_rank, name, "broadcast_async_")


class _Broadcast(torch.autograd.Function):
    """Broadcast whose gradient is the summed gradient on the root rank and zero elsewhere."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name):
        ctx.root_rank = root_rank
        return synchronize(broadcast_async(tensor, root_rank, name))

    @staticmethod
    def backward(ctx, grad_output):
        from ringrun.torch.mpi_ops import allreduce
        grad = allreduce(grad_output, op=Sum)
        if rank() != ctx.root_rank:
            grad = grad * 0
        return grad, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns ``tensor`` of ``root_rank`` on every rank; the input is not modified. Differentiable."""
    _check_process_set(process_set, "broadcast")
    return _Broadcast.apply(tensor, root_rank, name)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrites ``tensor`` with ``root_rank``'s on every rank and returns it."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def _even_splits(rows, what):
    if rows % size():
        raise ValueError(f"{what}: without splits the first dimension ({rows}) must divide evenly by size() "
                         f"({size()}); pass splits")
    return [rows // size()] * size()


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts an alltoall: rank r receives the ``splits[r]`` rows of every rank's tensor meant for
    it. synchronize() returns (output, received_splits)."""
    _check_process_set(process_set, "alltoall_async")
    _check_tensor(tensor, "alltoall_async")
    if tensor.dim() == 0:
        raise ValueError("alltoall_async: the tensor needs at least one dimension")
    rows = tensor.shape[0]
    splits = _even_splits(rows, "alltoall_async") if splits is None else [int(s) for s in torch.as_tensor(splits).tolist()]
    if len(splits) != size() or any(s < 0 for s in splits) or sum(splits) != rows:
        raise ValueError(f"alltoall_async: splits {splits} must hold size() ({size()}) non-negative counts "
                         f"that add up to the first dimension ({rows})")
    name = _auto_name("alltoall", name)
    every_splits = synchronize(allgather_async(torch.tensor([splits], dtype=torch.int64), name + ".splits"))
    gathered = synchronize(allgather_async(tensor, name))
    me = rank()
    pieces, received, start = [], [], 0
    for r in range(size()):
        row = every_splits[r].tolist()
        offset = start + sum(row[:me])
        pieces.append(gathered[offset:offset + row[me]])
        received.append(row[me])
        start += sum(row)
    return _completed((torch.cat(pieces), torch.tensor(received, dtype=torch.int32)))


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Scatters the rows of ``tensor`` to the ranks (``splits[r]`` rows to rank r, evenly when no
    splits are given) and gathers what every rank sent here, in rank order. Returns the output, and
    with ``splits`` also the number of rows received from each rank."""
    output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
    return output if splits is None else (output, received)


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set):
    """Starts a reducescatter: the reduction of ``tensor`` over all ranks, of which rank r keeps
    its share of the first dimension (the first ranks one row more when it does not divide)."""
    _check_process_set(process_set, "reducescatter_async")
    op = _op_code(op, None, "reducescatter_async")
    if op not in (Average, Sum):
        raise ValueError("reducescatter_async: op must be Average or Sum")
    if tensor.dim() == 0:
        raise ValueError("reducescatter_async: the tensor needs at least one dimension")
    from ringrun.torch.mpi_ops import allreduce_async
    handle = allreduce_async(tensor, name=_auto_name("reducescatter", name), op=op)
    share, extra = divmod(tensor.shape[0], size())
    me = rank()
    start = me * share + min(me, extra)
    rows = share + (1 if me < extra else 0)
    return _add_pending((), None, lambda: synchronize(handle).narrow(0, start, rows).clone())


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=global_process_set):
    """Returns this rank's share (split on the first dimension) of the reduction of ``tensor``."""
    compressed, ctx = compression.compress(tensor)
    return compression.decompress(synchronize(reducescatter_async(compressed, name, op, process_set)), ctx)


def barrier(process_set=global_process_set):
    """Returns once every rank has called barrier()."""
    _check_process_set(process_set, "barrier")
    _ringrun.barrier()


def join(device=-1):
    """Waits until every rank has called join() and returns the rank that called it last.

    Unlike Horovod's, a rank that has joined does not stand in for collectives the other ranks
    still run: every rank must submit the same ops before joining (give ranks equal numbers of
    batches, e.g. with DistributedSampler(drop_last=True)).
    """
    arrived = torch.tensor([time.time()], dtype=torch.float64)
    every = torch.empty(size(), dtype=torch.float64)
    _ringrun.allgather(arrived.data_ptr(), 1, _ringrun.FLOAT64, every.data_ptr())
    return int(torch.argmax(every))
