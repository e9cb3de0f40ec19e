# ringrun-test: np=2,3 timeout=120
"""Process sets: every collective restricted to a subset of the ranks, against references computed
locally; sets added at init and at run time, removed, and the errors of misuse. A set's ops run on
its own communicator and engine, so the even and the odd set run different ops at the same time.
"""
import torch

import ringrun.torch as hvd

STATIC = hvd.ProcessSet([0])
hvd.init(process_sets=[STATIC])
R, N = hvd.rank(), hvd.size()
EVEN = [r for r in range(N) if r % 2 == 0]
ODD = [r for r in range(N) if r % 2 == 1]

assert hvd.global_process_set.process_set_id == 0 and hvd.global_process_set.ranks == list(range(N))
assert hvd.global_process_set.size() == N and hvd.global_process_set.rank() == R
# Horovod's deeper module path names the same objects.
from ringrun.common import process_sets as common_sets  # noqa: E402
assert common_sets.global_process_set is hvd.global_process_set and common_sets.ProcessSet is hvd.ProcessSet
assert common_sets.add_process_set is hvd.add_process_set and common_sets.remove_process_set is hvd.remove_process_set

# The static set of init() holds rank 0 alone; removed before the even set (the same ranks at 2).
assert STATIC.process_set_id == 1 and STATIC.size() == 1 and STATIC.included() == (R == 0)
if R == 0:
    assert STATIC.rank() == 0
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum, process_set=STATIC), torch.ones(2))
assert hvd.remove_process_set(STATIC)

even = hvd.add_process_set(EVEN)
odd = hvd.add_process_set(hvd.ProcessSet(ODD))
mine, other = (even, odd) if R % 2 == 0 else (odd, even)
members = mine.ranks
assert mine.included() and not other.included()
assert mine.size() == len(members) and mine.rank() == members.index(R), (mine.size(), mine.rank())
assert even.process_set_id != odd.process_set_id and 0 not in (even.process_set_id, odd.process_set_id)


def check_equal(got, want, what):
    assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want), (what, got, want)


# allreduce (sync, async, in place, grouped) over each set: the sum of the members' ranks.
total = float(sum(members))
check_equal(hvd.allreduce(torch.full((5,), float(R)), op=hvd.Sum, process_set=mine), torch.full((5,), total), "allreduce")
check_equal(hvd.allreduce(torch.full((3,), float(R)), process_set=mine), torch.full((3,), total / len(members)),
            "average divides by the set's size")
t = torch.full((4,), float(R))
hvd.synchronize(hvd.allreduce_async_(t, name="set.inplace", op=hvd.Sum, process_set=mine))
check_equal(t, torch.full((4,), total), "allreduce_async_")
outs = hvd.grouped_allreduce([torch.full((2,), float(R)), torch.full((7,), 1.0)], op=hvd.Sum, process_set=mine)
check_equal(outs[1], torch.full((7,), float(len(members))), "grouped_allreduce")

# allgather of a different first dimension per member, in set order.
got = hvd.allgather(torch.full((R + 1, 2), float(R)), process_set=mine)
check_equal(got, torch.cat([torch.full((r + 1, 2), float(r)) for r in members]), "allgather")

# broadcast from the set's last member (a global rank).
root = members[-1]
check_equal(hvd.broadcast(torch.full((3,), float(R)), root_rank=root, process_set=mine), torch.full((3,), float(root)),
            "broadcast")

# alltoall: each member sends one row per member.
rows = torch.tensor([[float(R * 10 + i)] for i in range(len(members))])
out, received = hvd.alltoall(rows, splits=[1] * len(members), process_set=mine)
check_equal(out, torch.tensor([[float(r * 10 + mine.rank())] for r in members]), "alltoall")
check_equal(received, torch.ones(len(members), dtype=torch.int32), "alltoall received")

# reducescatter: the members split the rows.
full = torch.arange(len(members) * 2, dtype=torch.float32).view(-1, 1)
check_equal(hvd.reducescatter(full, op=hvd.Sum, process_set=mine),
            full[2 * mine.rank():2 * mine.rank() + 2] * len(members), "reducescatter")

# Objects and the barrier.
assert hvd.allgather_object(R, process_set=mine) == members
assert hvd.broadcast_object({"from": root} if R == root else None, root_rank=root, process_set=mine) == {"from": root}
hvd.barrier(process_set=mine)

# DistributedOptimizer over the even set: the even ranks average their gradients and end equal;
# the odd ranks (outside the set) step alone.
torch.manual_seed(R)
model = torch.nn.Linear(4, 2)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5), named_parameters=model.named_parameters(),
                               process_set=even)
for step in range(3):
    opt.zero_grad()
    model(torch.randn(8, 4)).pow(2).sum().backward()
    opt.step()
w = hvd.allgather(model.weight.detach().reshape(1, -1))
for r in EVEN:
    check_equal(w[r], w[0], "the even set trained alike")
for r in ODD:
    assert not torch.equal(w[r], w[0]), "an odd rank trained on its own gradients"


# Misuse: ops on a set this rank is not in, a set added twice, a root outside the set.
try:
    hvd.allreduce(torch.ones(1), process_set=other)
    raise AssertionError("an op on a set this rank is not in must raise")
except ValueError as e:
    assert f"rank {R} is not in process set" in str(e), e
for ranks in (EVEN, list(range(N))):
    try:
        hvd.add_process_set(ranks)
        raise AssertionError("a second set with the same ranks must raise")
    except ValueError as e:
        assert "has these ranks already" in str(e), e
if len(members) < N:
    try:
        hvd.broadcast(torch.ones(1), root_rank=other.ranks[0], process_set=mine)
        raise AssertionError("a root outside the set must raise")
    except ValueError as e:
        assert "is not in" in str(e), e

assert hvd.remove_process_set(odd) and hvd.remove_process_set(even)
assert not hvd.remove_process_set(even) and odd.process_set_id is None
assert not hvd.remove_process_set(hvd.global_process_set)
# Sets can be added again after removal; the world is unaffected throughout.
again = hvd.add_process_set(EVEN)
if again.included():
    check_equal(hvd.allreduce(torch.ones(2), op=hvd.Sum, process_set=again), torch.full((2,), float(len(EVEN))), "again")
hvd.remove_process_set(again)
check_equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(N)), "world")
hvd.shutdown()
print(f"rank {R}: process sets ok")
