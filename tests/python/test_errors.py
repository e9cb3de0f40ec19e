# ringrun-test: np=2,3 timeout=60
"""Errors are Python exceptions on every rank, never a hang: ranks that disagree on a tensor's
size or dtype raise InternalError naming the tensor and the ranks, and the job goes on; bad
arguments raise ValueError with the fix; unsupported Horovod features say so."""
import torch

import ringrun.torch as hvd


def raises(kind, fragment, call):
    try:
        call()
    except kind as e:
        assert fragment in str(e), (fragment, str(e))
        return e
    raise AssertionError(f"expected {kind.__name__} containing {fragment!r}")


try:
    hvd.size()
    raise AssertionError("size() before init() must raise")
except ValueError as e:
    assert "init()" in str(e), e

hvd.init()
R, N = hvd.rank(), hvd.size()
assert issubclass(hvd.InternalError, RuntimeError) and hvd.HorovodInternalError is hvd.InternalError
from ringrun.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt  # noqa: E402 (horovod.common's path)
assert HorovodInternalError is hvd.HorovodInternalError and HostsUpdatedInterrupt is hvd.HostsUpdatedInterrupt

# Mismatches across ranks, through the engine (named) and the plain path (unnamed).
e = raises(hvd.InternalError, "tensor 'allreduce.bad.count'", lambda: hvd.allreduce(torch.ones(3 + R), name="bad.count"))
assert "rank 0" in str(e) and f"rank {N - 1}" in str(e), e
raises(hvd.InternalError, "float64", lambda: hvd.allreduce(torch.ones(3, dtype=torch.float64 if R else torch.float32),
                                                            name="bad.dtype"))
raises(hvd.InternalError, "bad.bcast", lambda: hvd.broadcast(torch.ones(2 + R), root_rank=0, name="bad.bcast"))
# ... and the job goes on.
assert torch.equal(hvd.allreduce(torch.ones(4), name="after", op=hvd.Sum), torch.full((4,), float(N)))

# The caller's mistakes: ValueError naming the argument and the fix.
raises(ValueError, "root_rank 7", lambda: hvd.broadcast_(torch.ones(2), root_rank=7))
raises(ValueError, "dtype torch.complex64 is not supported", lambda: hvd.allreduce(torch.ones(2, dtype=torch.complex64)))
raises(ValueError, "sparse", lambda: hvd.allreduce(torch.ones(2).to_sparse()))
raises(ValueError, "either op or the deprecated average", lambda: hvd.allreduce(torch.ones(2), average=True, op=hvd.Sum))
assert hvd.synchronize(123456) is None  # Horovod's answer for an unknown handle
h = hvd.allreduce_async(torch.ones(2))
hvd.synchronize(h)
assert hvd.synchronize(h) is None
raises(ValueError, "unknown or already synchronized", lambda: hvd.poll(h))
raises(ValueError, "splits", lambda: hvd.alltoall(torch.ones(N + 1, 2)))
raises(hvd.InternalError, f"allgather float32 [2, {2 + R}]", lambda: hvd.allgather(torch.ones(2, 2 + R), name="rows"))
# The same element count in another shape: both shapes named, on every rank.
e = raises(hvd.InternalError, "tensor 'allreduce.shape'", lambda: hvd.allreduce(torch.ones(6).view((2, 3) if R else (3, 2)),
                                                                               name="shape"))
assert "[2, 3]" in str(e) and "[3, 2]" in str(e), e
# Two pending ops of one name on a rank: ValueError at once, on that rank.
pending = hvd.allreduce_async(torch.ones(3), name="twice")
raises(ValueError, "already pending", lambda: hvd.allreduce_async(torch.ones(3), name="twice"))
hvd.synchronize(pending)
raises(ValueError, "bool", lambda: hvd.allreduce(torch.ones(2, dtype=torch.bool), prescale_factor=2.0))

# What ringrun does not have, by name.
raises(NotImplementedError, "Adasum", lambda: hvd.reducescatter(torch.ones(2 * N), op=hvd.Adasum))
raises(ValueError, "must be a ProcessSet", lambda: hvd.allreduce(torch.ones(2), process_set=object()))
raises(ValueError, "not registered", lambda: hvd.allreduce(torch.ones(2), process_set=hvd.ProcessSet([0])))
raises(NotImplementedError, "MPI communicator", lambda: hvd.init(comm=[0, 1]))

hvd.shutdown()
print(f"rank {R}: errors ok")
