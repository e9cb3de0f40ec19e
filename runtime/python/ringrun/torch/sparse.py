"""Sparse gradients: the allreduce of a sparse COO tensor as Horovod does it."""

import torch

from ringrun.torch.basics import Average, _set_size, global_process_set, synchronize
from ringrun.torch.gather_ops import allgather_async

# Public: ringrun.torch and ringrun.torch.mpi_ops export these (mpi_ops.__all__).
__all__ = ['sparse_allreduce_async']

# The gathered indices come from valid sparse tensors: torch >= 2 need not check them again (and
# says so in a warning unless told).
_UNCHECKED = {"check_invariants": False} if hasattr(torch.sparse, "check_sparse_tensor_invariants") else {}


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Starts the allreduce of a sparse COO tensor: an allgather of every rank's indices and
    values (ranks may hold different numbers of them), which the sparse result sums when it is
    coalesced (divided by the set's size for Average). Returns, as Horovod does, a function that
    waits for the allgathers and returns the sparse result."""
    if not tensor.is_sparse:
        raise ValueError("sparse_allreduce_async: the tensor is dense; use allreduce_async")
    t = tensor.coalesce()
    indices = allgather_async(t._indices().transpose(0, 1).contiguous(), name=f"{name}.indices",
                              process_set=process_set)
    values = allgather_async(t._values().contiguous(), name=f"{name}.values", process_set=process_set)

    def handle():
        gathered_values = synchronize(values)
        gathered_indices = synchronize(indices)
        if op == Average:
            gathered_values = gathered_values / _set_size(process_set)
        return torch.sparse_coo_tensor(gathered_indices.transpose(0, 1), gathered_values, t.size(), **_UNCHECKED)

    return handle
