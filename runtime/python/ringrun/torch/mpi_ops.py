"""``horovod.torch.mpi_ops``'s names, for scripts that import them from there.

The definitions live in basics (initialisation, queries, handles), reduce_ops (the allreduce
family), gather_ops (allgather, broadcast, alltoall, reducescatter, join, barrier) and sparse.
"""

from ringrun.torch import basics as _basics, gather_ops as _gather_ops, reduce_ops as _reduce_ops, sparse as _sparse
from ringrun.torch.basics import *  # noqa: F401,F403
from ringrun.torch.gather_ops import *  # noqa: F401,F403
from ringrun.torch.reduce_ops import *  # noqa: F401,F403
from ringrun.torch.sparse import *  # noqa: F401,F403

# Each module lists its own public names once; ringrun.torch takes this list.
__all__ = _basics.__all__ + _gather_ops.__all__ + _reduce_ops.__all__ + _sparse.__all__
