# ringrun-test: np=2,3 timeout=120
"""Every collective of ringrun.torch and every dtype against a reference computed locally.

Each rank builds every rank's input from the rank number, so it can compute the expected result of
each collective itself and compare.
"""
import torch

import ringrun.torch as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()
assert hvd.is_initialized() and 0 <= R < N and N >= 2, (R, N)
assert hvd.local_size() == N and hvd.local_rank() == R and hvd.cross_size() == 1 and hvd.cross_rank() == 0
assert hvd.mpi_built() is False and isinstance(hvd.nccl_built(), int) and hvd.ccl_built() is False

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.uint8, torch.int8,
          torch.int16]


def value(rank, dtype, n=7):
    """Rank r's tensor: small integers, exact in every dtype (fp16/bf16 too) after any reduction."""
    return (torch.arange(n) % 3 + rank + 1).to(dtype)


def every(dtype, n=7):
    return torch.stack([value(r, dtype, n) for r in range(N)]).to(torch.float64)


def check_equal(got, want, what):
    assert got.dtype == want.dtype, (what, got.dtype, want.dtype)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    assert torch.equal(got, want), (what, got, want)


# allreduce family, every op and dtype, in and out of place, sync and async.
for dtype in DTYPES:
    ops = {hvd.Sum: every(dtype).sum(0), hvd.Min: every(dtype).min(0).values, hvd.Max: every(dtype).max(0).values}
    ops[hvd.Product] = every(dtype).prod(0)
    ops[hvd.Average] = every(dtype).sum(0) / N if dtype.is_floating_point else torch.div(every(dtype).sum(0), N, rounding_mode="trunc")
    for op, reference in ops.items():
        if dtype == torch.uint8 and op in (hvd.Sum, hvd.Product, hvd.Average):
            reference = reference.remainder(256) if op != hvd.Average else torch.div(every(dtype).sum(0).remainder(256), N, rounding_mode="trunc")
        if dtype == torch.int8 and op == hvd.Product:
            reference = (reference.to(torch.int64) + 128).remainder(256) - 128  # wraps as int8 does
        want = reference.to(dtype)
        x = value(R, dtype)
        check_equal(hvd.allreduce(x, op=op), want, f"allreduce {dtype} {op}")
        check_equal(x, value(R, dtype), "allreduce leaves its input")
        check_equal(hvd.allreduce(x, op=op, name=f"ar.{dtype}.{op}"), want, "named allreduce")
        y = value(R, dtype)
        assert hvd.allreduce_(y, op=op) is y
        check_equal(y, want, f"allreduce_ {dtype} {op}")
        z = value(R, dtype)
        h = hvd.allreduce_async_(z, name=f"async_.{dtype}.{op}", op=op)
        check_equal(hvd.synchronize(h), want, "allreduce_async_")
        check_equal(z, want, "allreduce_async_ in place")
        h = hvd.allreduce_async(value(R, dtype), op=op)
        check_equal(hvd.synchronize(h), want, "allreduce_async")

# The deprecated average argument, scaling factors, a non-contiguous tensor, a scalar, empty.
x = value(R, torch.float32)
check_equal(hvd.allreduce(x, average=False), every(torch.float32).sum(0).float(), "average=False")
check_equal(hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5), every(torch.float32).sum(0).float(), "scaled")
m = torch.stack([value(R, torch.float32)] * 2, 1)  # 7 x 2, transposed below: not contiguous
t = m.t()
assert not t.is_contiguous()
check_equal(hvd.allreduce(t, op=hvd.Sum), torch.stack([every(torch.float32).sum(0).float()] * 2), "non-contiguous")
hvd.allreduce_(t, op=hvd.Sum)
check_equal(t, torch.stack([every(torch.float32).sum(0).float()] * 2), "non-contiguous in place")
check_equal(hvd.allreduce(torch.tensor(float(R)), op=hvd.Sum), torch.tensor(float(sum(range(N)))), "scalar")
check_equal(hvd.allreduce(torch.empty(0)), torch.empty(0), "empty")

# fp16 compression: float32 in and out, float16 on the wire.
got = hvd.allreduce(value(R, torch.float32), op=hvd.Sum, compression=hvd.Compression.fp16)
check_equal(got, every(torch.float32).sum(0).float(), "fp16 compression")

# Out-of-place allreduce is differentiable: d(sum over ranks)/dx = N for Sum.
w = value(R, torch.float32).requires_grad_()
hvd.allreduce(w, op=hvd.Sum).sum().backward()
check_equal(w.grad, torch.full((7,), float(N)), "allreduce gradient")

# Grouped allreduce.
group = [value(R, torch.float32, n) for n in (1, 5, 300)]
outs = hvd.grouped_allreduce(group, op=hvd.Sum)
for n, out in zip((1, 5, 300), outs):
    check_equal(out, every(torch.float32, n).sum(0).float(), "grouped_allreduce")
hvd.synchronize(hvd.grouped_allreduce_async_(group, name="grouped", op=hvd.Max))
for n, out in zip((1, 5, 300), group):
    check_equal(out, every(torch.float32, n).max(0).values.float(), "grouped_allreduce_async_")

# allgather with a different first dimension per rank, every dtype; and its gradient.
for dtype in DTYPES:
    mine = torch.stack([value(R, dtype, 3)] * (R + 1))  # rank r: r+1 rows of 3
    want = torch.cat([torch.stack([value(r, dtype, 3)] * (r + 1)) for r in range(N)])
    check_equal(hvd.allgather(mine), want, f"allgather {dtype}")
same = torch.full((2, 2), float(R))
check_equal(hvd.allgather(same, name="same"), torch.cat([torch.full((2, 2), float(r)) for r in range(N)]), "even allgather")
g = torch.ones(R + 1, 2, requires_grad=True)
hvd.allgather(g).sum().backward()
check_equal(g.grad, torch.ones(R + 1, 2), "allgather gradient (averaged over ranks, as Horovod's)")

# broadcast from every root, in and out of place.
for root in range(N):
    for dtype in DTYPES:
        b = value(R, dtype)
        check_equal(hvd.broadcast(b, root_rank=root), value(root, dtype), f"broadcast {dtype} from {root}")
        check_equal(b, value(R, dtype), "broadcast leaves its input")
        assert hvd.broadcast_(b, root_rank=root, name=f"b.{root}.{dtype}") is b
        check_equal(b, value(root, dtype), "broadcast_")
h = hvd.broadcast_async_(torch.full((3,), float(R)), root_rank=N - 1)
check_equal(hvd.synchronize(h), torch.full((3,), float(N - 1)), "broadcast_async_")

# alltoall: rank r sends (s + 1) rows to rank s, each row holding r * 10 + s.
splits = [s + 1 for s in range(N)]
rows = torch.cat([torch.full((s + 1, 2), float(R * 10 + s)) for s in range(N)])
out, received = hvd.alltoall(rows, splits=splits)
check_equal(out, torch.cat([torch.full((R + 1, 2), float(r * 10 + R)) for r in range(N)]), "alltoall")
check_equal(received, torch.tensor([R + 1] * N, dtype=torch.int32), "alltoall received splits")
even = hvd.alltoall(torch.arange(N * 2, dtype=torch.int64) + 100 * R)
check_equal(even, torch.tensor([100 * r + 2 * R + k for r in range(N) for k in range(2)]), "even alltoall")

# reducescatter: the first ranks get one row more.
rows = 2 * N + 1
full = torch.arange(rows * 2, dtype=torch.float32).view(rows, 2) * (R + 1)
share, extra = divmod(rows, N)
start = R * share + min(R, extra)
want = (torch.arange(rows * 2, dtype=torch.float32).view(rows, 2) * sum(range(1, N + 1)))[start:start + share + (R < extra)]
check_equal(hvd.reducescatter(full, op=hvd.Sum), want, "reducescatter")

# poll, barrier, join.
h = hvd.allreduce_async(torch.ones(1000), name="polled")
while not hvd.poll(h):
    pass
check_equal(hvd.synchronize(h), torch.ones(1000), "poll then synchronize")
hvd.barrier()
last = hvd.join()
assert 0 <= last < N, last

# Ranks that submit named ops in different orders still agree (the engine's negotiation).
names = [f"order.{i}" for i in range(6)]
order = names if R % 2 == 0 else list(reversed(names))
tensors = {n: torch.full((5,), float(R + i)) for i, n in enumerate(names)}
handles = {n: hvd.allreduce_async_(tensors[n], name=n, op=hvd.Sum) for n in order}
for i, n in enumerate(names):
    check_equal(hvd.synchronize(handles[n]), torch.full((5,), float(sum(range(N)) + N * i)), "any order")

hvd.shutdown()
assert not hvd.is_initialized()
print(f"rank {R}: collectives ok")
