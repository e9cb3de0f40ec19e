"""``horovod.torch.mpi_ops``'s names, for scripts that import them from there.

The definitions live in basics (initialisation, queries, handles), reduce_ops (the allreduce
family), gather_ops (allgather, broadcast, alltoall, reducescatter, join, barrier) and sparse.
"""

from ringrun.torch.basics import (  # noqa: F401
    Adasum, Average, HorovodInternalError, InternalError, Max, Min, Product, ProcessSet, Sum, add_process_set,
    ccl_built, cross_rank, cross_size, cuda_built, ddl_built, global_process_set, gloo_built, gloo_enabled, init,
    is_homogeneous, is_initialized, local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built,
    poll, rank, remove_process_set, rocm_built, shutdown, size, start_timeline, stop_timeline, synchronize)
from ringrun.torch.gather_ops import (  # noqa: F401
    allgather, allgather_async, alltoall, alltoall_async, barrier, broadcast, broadcast_, broadcast_async,
    broadcast_async_, grouped_allgather, grouped_allgather_async, grouped_reducescatter, grouped_reducescatter_async,
    join, reducescatter, reducescatter_async)
from ringrun.torch.reduce_ops import (  # noqa: F401
    allreduce, allreduce_, allreduce_async, allreduce_async_, grouped_allreduce, grouped_allreduce_,
    grouped_allreduce_async, grouped_allreduce_async_)
from ringrun.torch.sparse import sparse_allreduce_async  # noqa: F401
