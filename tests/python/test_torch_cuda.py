# ringrun-test: np=1 timeout=300 gpu
"""ringrun.torch on CUDA tensors (NCCL), against torch's own DDP in the same run.

Checks: allreduce (sum, average, min, max; float32, float16, bfloat16; in place and not),
broadcast, allgather on CUDA tensors; DistributedOptimizer (plain and fp16 compression) trains
a CUDA model exactly as DistributedDataParallel over NCCL does from the same start and data.
Then prints one timing table, ringrun beside DDP/torch.distributed: allreduce latency and
bandwidth on device buffers, and a torchvision ResNet-50 training step.

Each rank uses cuda:local_rank, so on a host with G GPUs run it with -np <= G (NCCL refuses two
ranks on one GPU). Exits 77 (a skip) where torch sees no CUDA device or ringrun has no NCCL.
"""

import os
import socket
import sys
import time

import torch
import torch.distributed as dist

import ringrun.torch as hvd

hvd.init()
if not torch.cuda.is_available() or not hvd.nccl_built():
    print(f'SKIP: torch.cuda.is_available()={torch.cuda.is_available()}, ringrun nccl_built()={hvd.nccl_built()}')
    sys.exit(77)
R, N, L = hvd.rank(), hvd.size(), hvd.local_rank()
torch.cuda.set_device(L)
dev = torch.device('cuda', L)
if R == 0:
    print(f'torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL {torch.cuda.nccl.version()}, '
          f'{torch.cuda.get_device_name(dev)}, {N} rank(s)', flush=True)


def check_collectives():
    for dtype, tol in ((torch.float32, 0.0), (torch.float16, 1e-3), (torch.bfloat16, 1e-2)):
        base = torch.arange(1000, device=dev, dtype=torch.float32).remainder(17).to(dtype)
        mine = base + R
        want_sum = (base.float() * N + N * (N - 1) / 2).to(dtype)
        got = hvd.allreduce(mine, op=hvd.Sum, name=f'sum.{dtype}')
        assert got.device == dev, f'allreduce {dtype}: result on {got.device}'
        assert torch.allclose(got.float(), want_sum.float(), rtol=tol), f'allreduce sum {dtype}: wrong'
        got = hvd.allreduce(mine, name=f'avg.{dtype}')  # Average by default, as in Horovod
        want = (base.float() + (N - 1) / 2).to(dtype)
        assert torch.allclose(got.float(), want.float(), rtol=tol, atol=tol), f'allreduce average {dtype}: wrong'
        for op, want in ((hvd.Min, base), (hvd.Max, base + (N - 1))):
            inplace = mine.clone()
            hvd.allreduce_(inplace, op=op, name=f'{op}.{dtype}')
            assert torch.equal(inplace, want.to(dtype)), f'allreduce_ {op} {dtype}: wrong'
        b = mine.clone()
        hvd.broadcast_(b, root_rank=0, name=f'bcast.{dtype}')
        assert torch.equal(b, base), f'broadcast_ {dtype}: wrong'
        g = hvd.allgather(mine.view(10, 100), name=f'gather.{dtype}')
        assert g.shape == (10 * N, 100) and g.device == dev, f'allgather {dtype}: shape {g.shape} on {g.device}'
        for r in range(N):
            assert torch.equal(g[10 * r:10 * (r + 1)].reshape(-1), base + r), f'allgather {dtype}: block {r}'
    # A CPU and a CUDA tensor in one job, and a result that a later kernel reads at once.
    cpu = hvd.allreduce(torch.ones(5), op=hvd.Sum, name='cpu')
    assert torch.equal(cpu, torch.full((5,), float(N))), 'host allreduce beside device ones: wrong'
    x = torch.ones(1 << 20, device=dev)
    for i in range(20):
        x = hvd.allreduce(x * 2, op=hvd.Average, name='chain') + 1
    assert torch.allclose(x, torch.full_like(x, 2.0 ** 20 + 2.0 ** 20 - 1)), 'chained allreduce: wrong'


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def init_ddp():
    port = hvd.broadcast_object(free_port() if R == 0 else None, root_rank=0, name='ddp.port')
    addr = hvd.broadcast_object(socket.gethostname() if N > 1 and R == 0 else '127.0.0.1', root_rank=0, name='ddp.addr')
    dist.init_process_group('nccl', init_method=f'tcp://{addr}:{port}', rank=R, world_size=N, device_id=dev)


def mlp():
    torch.manual_seed(5)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(dev)


def batch(step):
    g = torch.Generator(device=dev).manual_seed(100 + step * 7 + R)
    return torch.randn(32, 64, device=dev, generator=g), torch.randint(0, 10, (32,), device=dev, generator=g)


def train_ringrun(compression, steps=10):
    model = mlp()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters(), compression=compression)
    for step in range(steps):
        x, y = batch(step)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return model


def train_ddp(steps=10):
    model = torch.nn.parallel.DistributedDataParallel(mlp(), device_ids=[L])
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(steps):
        x, y = batch(step)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return model.module


def max_diff(a, b):
    return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))


def check_training():
    ddp = train_ddp()
    plain = train_ringrun(hvd.Compression.none)
    diff = max_diff(plain, ddp)
    assert diff <= 1e-5, f'DistributedOptimizer on CUDA differs from DDP by {diff}'
    fp16 = train_ringrun(hvd.Compression.fp16)
    diff16 = max_diff(fp16, ddp)
    assert diff16 <= 1e-2, f'fp16 compression on CUDA differs from DDP by {diff16}'
    every = hvd.allgather(torch.cat([p.detach().reshape(1, -1) for p in plain.parameters()], 1), name='same')
    assert torch.equal(every, every[0].expand_as(every)), 'parameters differ across ranks'
    if R == 0:
        print(f'training on CUDA: ringrun vs DDP max |diff| {diff:.2e} (fp16 compression {diff16:.2e})', flush=True)


def timed(fn, iters, warmup=5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / iters
    return hvd.allreduce(torch.tensor([seconds]), op=hvd.Max, name='timed').item()  # the slowest rank


def allreduce_rows():
    rows = []
    for nbytes in (4, 4096, 1 << 20, 64 << 20, 256 << 20):
        t = torch.ones(max(1, nbytes // 4), device=dev)
        iters = 200 if nbytes <= 1 << 20 else 20
        ours = timed(lambda: hvd.allreduce_(t, op=hvd.Sum, name='bench'), iters)
        theirs = timed(lambda: dist.all_reduce(t), iters)
        busbw = lambda s: nbytes * 2 * (N - 1) / N / s / 1e9 if N > 1 else nbytes / s / 1e9  # noqa: E731
        rows.append((f'allreduce {nbytes} B (us; GB/s)', ours * 1e6, theirs * 1e6,
                     f'{busbw(ours):.1f} / {busbw(theirs):.1f}'))
    return rows


def resnet_rows():
    try:
        import torchvision
    except ImportError as e:
        return [('resnet50 step', float('nan'), float('nan'), f'torchvision missing: {e}')]
    x = torch.randn(64, 3, 224, 224, device=dev)
    y = torch.randint(0, 1000, (64,), device=dev)

    def step_fn(model, opt):
        def step():
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        return step
    torch.manual_seed(0)
    model = torchvision.models.resnet50().to(dev)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    ours = timed(step_fn(model, opt), 20)
    torch.manual_seed(0)
    ddp = torch.nn.parallel.DistributedDataParallel(torchvision.models.resnet50().to(dev), device_ids=[L])
    theirs = timed(step_fn(ddp, torch.optim.SGD(ddp.parameters(), lr=0.01)), 20)
    return [('resnet50 bs64 step (ms)', ours * 1e3, theirs * 1e3, '')]


check_collectives()
init_ddp()
check_training()
rows = allreduce_rows() + resnet_rows()
if R == 0:
    print(f'| {N} rank(s), CUDA tensors | ringrun.torch | torch DDP/NCCL | torch/ringrun time ratio | busbw GB/s ours / theirs |')
    print('|---|---|---|---|---|')
    for what, ours, theirs, extra in rows:
        print(f'| {what} | {ours:.2f} | {theirs:.2f} | {theirs / ours:.2f} | {extra} |', flush=True)
dist.destroy_process_group()
print(f'rank {R}: ok', flush=True)
