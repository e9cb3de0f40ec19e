# ringrun-test: np=2,3 timeout=120
"""join(): a rank that runs out of batches joins; the others' allreduces go on with its neutral
input (zeros for Sum and Average, the identity of Min, Max and Product) and every rank's join()
returns the rank that joined last. The other collectives cannot be stood in for: the ranks that
call them raise InternalError, and the job goes on."""
import torch

import ringrun.torch as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()

for first in range(N):
    # Rank `first` joins at once; the others run allreduces of every op, then join too.
    if R == first:
        last = hvd.join()
    else:
        x = torch.full((5,), float(R + 1))
        others = [r + 1 for r in range(N) if r != first]
        got = hvd.allreduce(x, name="joined.sum", op=hvd.Sum)
        assert torch.equal(got, torch.full((5,), float(sum(others)))), got
        got = hvd.allreduce(x, name="joined.avg")
        assert torch.allclose(got, torch.full((5,), sum(others) / N)), got  # divided by every rank, as Horovod
        for op, want in ((hvd.Min, min(others)), (hvd.Max, max(others))):
            got = hvd.allreduce(torch.full((2,), float(R + 1)), name=f"joined.{op}", op=op)
            assert torch.equal(got, torch.full((2,), float(want))), (op, got)
        got = hvd.allreduce(torch.full((3,), R + 1, dtype=torch.int64), name="joined.prod", op=hvd.Product)
        want = 1
        for v in others:
            want *= v
        assert torch.equal(got, torch.full((3,), want, dtype=torch.int64)), got
        fused = [hvd.allreduce_async(torch.ones(n), name=f"joined.fused.{n}", op=hvd.Sum) for n in (1, 10, 100)]
        for n, h in zip((1, 10, 100), fused):
            assert torch.equal(hvd.synchronize(h), torch.full((n,), float(N - 1)))
        last = hvd.join()
    assert last != first or N == 1, (last, first)
    assert hvd.allgather_object(last) == [last] * N, "join() returns the same rank everywhere"

# Allgather and broadcast cannot be stood in for: they fail at once, naming join, and the job goes
# on. Unnamed, as Horovod's own test calls them: with 3 ranks the ranks' automatic names drift
# apart (each skipped a call once), so waiting for the others to submit the same one would hang.
for first in range(N):
    if R == first:
        hvd.join()
        continue
    for call in (lambda: hvd.allgather(torch.ones(2, 2)),
                 lambda: hvd.broadcast(torch.ones(2), root_rank=R, name="joined.bcast")):
        try:
            call()
            raise AssertionError("a collective a joined rank cannot stand in for must raise")
        except hvd.InternalError as e:
            assert "join()" in str(e), e
    hvd.join()
assert torch.equal(hvd.allreduce(torch.ones(1), op=hvd.Sum), torch.full((1,), float(N)))
hvd.shutdown()
print(f"rank {R}: join ok")
