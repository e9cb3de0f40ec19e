"""ringrun.torch: Horovod's PyTorch API on ringrun's runtime.

A Horovod script migrates by changing its import::

    import ringrun.torch as hvd

    hvd.init()
    model = ...
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

and runs under ``ringrun -np 4 python3 train.py`` (or srun/mpirun through ringrun). Gradients are
allreduced as backward produces them, fused by the engine, on CPU tensors (shared memory and TCP)
and on CUDA tensors (NCCL) in builds that have it. Failures raise InternalError on every rank.
Elastic training (``ringrun --min-np``): ``ringrun.torch.elastic`` (``hvd.elastic.run``,
``hvd.elastic.TorchState``, ``hvd.elastic.ElasticSampler``).
"""

from ringrun.torch.basics import (  # noqa: F401
    Adasum, Average, HorovodInternalError, HostsUpdatedInterrupt, InternalError, Max, Min, Product, ProcessSet, Sum,
    add_process_set, ccl_built, cross_rank, cross_size, cuda_built, ddl_built, global_process_set, gloo_built,
    gloo_enabled, init, is_homogeneous, is_initialized, local_rank, local_size, mpi_built, mpi_enabled,
    mpi_threads_supported, nccl_built, poll, rank, remove_process_set, rocm_built, shutdown, size, start_timeline,
    stop_timeline, synchronize)
from ringrun.torch.compression import Compression  # noqa: F401
from ringrun.torch.gather_ops import (  # noqa: F401
    allgather, allgather_async, alltoall, alltoall_async, barrier, broadcast, broadcast_, broadcast_async,
    broadcast_async_, grouped_allgather, grouped_allgather_async, grouped_reducescatter, grouped_reducescatter_async,
    join, reducescatter, reducescatter_async)
from ringrun.torch.reduce_ops import (  # noqa: F401
    allreduce, allreduce_, allreduce_async, allreduce_async_, grouped_allreduce, grouped_allreduce_,
    grouped_allreduce_async, grouped_allreduce_async_)
from ringrun.torch.sparse import sparse_allreduce_async  # noqa: F401
from ringrun.torch.functions import (  # noqa: F401
    allgather_object, broadcast_object, broadcast_optimizer_state, broadcast_parameters)
from ringrun.torch.optimizer import DistributedOptimizer  # noqa: F401
from ringrun.torch.sync_batch_norm import SyncBatchNorm  # noqa: F401
from ringrun.torch import elastic  # noqa: F401,E402
