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

from ringrun.torch.mpi_ops import *  # noqa: F401,F403  (the collectives and queries: mpi_ops.__all__)
from ringrun.torch.compression import Compression  # noqa: F401
from ringrun.torch.functions import (  # noqa: F401
    allgather_object, broadcast_object, broadcast_optimizer_state, broadcast_parameters)
from ringrun.torch.optimizer import DistributedOptimizer  # noqa: F401
from ringrun.torch.sync_batch_norm import SyncBatchNorm  # noqa: F401
from ringrun.torch import elastic  # noqa: F401,E402
