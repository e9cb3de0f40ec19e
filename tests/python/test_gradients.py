# ringrun-test: np=2,3 timeout=120
"""The gradients of the collectives, as Horovod defines them, against references computed locally;
and the scaling factors on every dtype.

allreduce: the allreduce of the output's gradient (same op and factors); allgather: this rank's
rows of the averaged gradient; broadcast: the averaged gradient on the root, zero elsewhere;
alltoall: the alltoall of the gradient back by the received splits; reducescatter: the allgather
of the gradient (times the set's size for Sum, times the factors); grouped ops alike, per tensor.
"""
import torch

import ringrun.torch as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()


def close(got, want, what, tol=1e-6):
    assert got.shape == want.shape and torch.allclose(got, want, atol=tol), (what, got, want)


# allgather: rank r holds r+1 rows; the output's gradient on rank k is k+1 everywhere, so the
# averaged gradient is the mean of 1..N and this rank's rows of it come back.
x = torch.ones(R + 1, 3, requires_grad=True)
out = hvd.allgather(x)
out.backward(torch.full_like(out, float(R + 1)))
close(x.grad, torch.full((R + 1, 3), sum(range(1, N + 1)) / N), "allgather gradient")

xs = [torch.ones(R + 1, 2, requires_grad=True), torch.ones(2, 4, requires_grad=True)]
outs = hvd.grouped_allgather(xs)
torch.autograd.backward(outs, [torch.full_like(o, float(R + 1)) for o in outs])
for t in xs:
    close(t.grad, torch.full_like(t, sum(range(1, N + 1)) / N), "grouped_allgather gradient")

# broadcast from the last rank: the root gets the averaged gradient, the others zero.
root = N - 1
b = torch.ones(4, requires_grad=True)
hvd.broadcast(b, root_rank=root).backward(torch.full((4,), float(R + 1)))
close(b.grad, torch.full((4,), sum(range(1, N + 1)) / N if R == root else 0.0), "broadcast gradient")

# allreduce and grouped allreduce: the same op on the gradients.
a = torch.ones(3, requires_grad=True)
hvd.allreduce(a, op=hvd.Sum, prescale_factor=2.0).backward(torch.full((3,), float(R + 1)))
close(a.grad, torch.full((3,), 2.0 * sum(range(1, N + 1))), "allreduce gradient (Sum, prescale 2)")
gs = [torch.ones(2, requires_grad=True), torch.ones(5, requires_grad=True)]
outs = hvd.grouped_allreduce(gs, op=hvd.Average)
torch.autograd.backward(outs, [torch.full_like(o, float(R + 1)) for o in outs])
for t in gs:
    close(t.grad, torch.full_like(t, sum(range(1, N + 1)) / N), "grouped_allreduce gradient")

# alltoall: rank r sends s+1 rows to rank s; the gradient goes back the same way.
splits = [s + 1 for s in range(N)]
t = torch.cat([torch.full((s + 1, 2), float(R)) for s in range(N)]).requires_grad_()
out, received = hvd.alltoall(t, splits=splits)
out.backward(torch.cat([torch.full((R + 1, 2), float(src)) for src in range(N)]))
# Rows sent to rank s come back holding what s multiplied them by: this rank's number.
close(t.grad, torch.full_like(t, float(R)), "alltoall gradient")

# reducescatter: this rank's rows of the sum; the gradient is the allgather of the output's.
rows = 2 * N
r = torch.ones(rows, 3, requires_grad=True)
share = hvd.reducescatter(r, op=hvd.Sum)
share.backward(torch.full_like(share, float(R + 1)))
want = torch.cat([torch.full((2, 3), float((k + 1) * N)) for k in range(N)])
close(r.grad, want, "reducescatter gradient (Sum)")
r = torch.ones(rows, 3, requires_grad=True)
share = hvd.reducescatter(r, op=hvd.Average, prescale_factor=3.0, postscale_factor=0.5)
close(share.detach(), torch.full((2, 3), 1.5), "reducescatter with factors")
share.backward(torch.ones_like(share))
close(r.grad, torch.full((rows, 3), 1.5), "reducescatter gradient (Average, factors)")
rs = [torch.ones(rows, 1, requires_grad=True), torch.ones(N, 2, requires_grad=True)]
outs = hvd.grouped_reducescatter(rs, op=hvd.Sum)
torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])
for t in rs:
    close(t.grad, torch.full_like(t, float(N)), "grouped_reducescatter gradient")

# Scaling factors on integers (in float64, truncated back) and half precision (in float32).
got = hvd.allreduce(torch.full((4,), 7, dtype=torch.int32), op=hvd.Sum, prescale_factor=0.5)
assert torch.equal(got, torch.full((4,), 3 * N, dtype=torch.int32)), got  # 7 * 0.5 -> 3 on each rank
got = hvd.allreduce(torch.full((4,), 10, dtype=torch.int64), op=hvd.Sum, postscale_factor=0.25)
assert torch.equal(got, torch.full((4,), int(10 * N * 0.25), dtype=torch.int64)), got
got = hvd.allreduce(torch.full((4,), 2.0, dtype=torch.float16), op=hvd.Sum, prescale_factor=1.5)
assert torch.equal(got, torch.full((4,), 3.0 * N, dtype=torch.float16)), got
got = hvd.reducescatter(torch.full((N, 2), 9, dtype=torch.int32), op=hvd.Sum, postscale_factor=0.5)
assert torch.equal(got, torch.full((1, 2), int(9 * N * 0.5), dtype=torch.int32)), got

# Every dtype through allgather, broadcast and alltoall (not only the reducible ones).
for dtype in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
              torch.float32, torch.float64, torch.bool):
    mine = (torch.arange(R + 1) % 2 == R % 2) if dtype == torch.bool else torch.arange(R + 1).to(dtype)
    every = torch.cat([(torch.arange(k + 1) % 2 == k % 2) if dtype == torch.bool else torch.arange(k + 1).to(dtype)
                       for k in range(N)])
    assert torch.equal(hvd.allgather(mine), every), (dtype, "allgather")
    assert torch.equal(hvd.broadcast(mine[:1], root_rank=0), every[:1]), (dtype, "broadcast")
    sent = torch.stack([torch.tensor(R * 10 + k).to(dtype) for k in range(N)]) if dtype != torch.bool else \
        torch.tensor([(R + k) % 2 == 0 for k in range(N)])
    want = torch.stack([torch.tensor(k * 10 + R).to(dtype) for k in range(N)]) if dtype != torch.bool else \
        torch.tensor([(k + R) % 2 == 0 for k in range(N)])
    assert torch.equal(hvd.alltoall(sent), want), (dtype, "alltoall")
# bool allreduce: Sum and Max are a logical or, Min and Product a logical and.
flags = torch.tensor([R == 0, True, False])
assert torch.equal(hvd.allreduce(flags, op=hvd.Max), torch.tensor([True, True, False]))
assert torch.equal(hvd.allreduce(flags, op=hvd.Min), torch.tensor([N == 1, True, False]))
hvd.shutdown()
print(f"rank {R}: gradients ok")
