# ringrun-test: np=2,3 timeout=120
"""SyncBatchNorm on N ranks equals torch's BatchNorm on the global batch: output, input/weight/bias
gradients, running statistics; with uneven per-rank batches, 2D/3D/4D inputs, momentum=None,
affine=False, track_running_stats=False, and eval mode."""

import torch

import ringrun.torch as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()
TOL = 1e-5
ROWS = [3 + r for r in range(N)]  # uneven batches: the statistics must weight ranks by count
START = sum(ROWS[:R])


def maxdiff(a, b):
    return (a.detach() - b.detach()).abs().max().item()


def check(what, shape, reference_cls, steps=2, **kw):
    g = torch.Generator().manual_seed(len(what))
    ref = reference_cls(shape[1], **kw)
    sync = hvd.SyncBatchNorm(shape[1], **kw)
    if ref.weight is not None:
        with torch.no_grad():
            ref.weight.copy_(torch.rand(shape[1], generator=g) + 0.5)
            ref.bias.copy_(torch.randn(shape[1], generator=g))
        sync.load_state_dict(ref.state_dict())
    for step in range(steps):
        x_all = torch.randn((sum(ROWS),) + shape[1:], generator=g) * 3 + 1.5
        w_all = torch.randn(x_all.shape, generator=g)  # the loss weights: a non-trivial output gradient
        x_ref = x_all.clone().requires_grad_()
        x = x_all[START:START + ROWS[R]].clone().requires_grad_()
        out_ref = ref(x_ref)
        out = sync(x)
        assert maxdiff(out, out_ref[START:START + ROWS[R]]) <= TOL, f'{what}: forward differs'
        (out_ref * w_all).sum().backward()
        (out * w_all[START:START + ROWS[R]]).sum().backward()
        assert maxdiff(x.grad, x_ref.grad[START:START + ROWS[R]]) <= TOL, f'{what}: input gradient differs'
        if ref.weight is not None:
            # Weight and bias gradients stay local; their sum over ranks is the global gradient.
            for name in ('weight', 'bias'):
                local = getattr(sync, name).grad
                total = hvd.allreduce(local, op=hvd.Sum, name=f'{what}.{name}.{step}')
                assert maxdiff(total, getattr(ref, name).grad) <= TOL, f'{what}: {name} gradient differs'
                local.zero_()
                getattr(ref, name).grad.zero_()
    if ref.running_mean is not None:
        assert maxdiff(sync.running_mean, ref.running_mean) <= TOL, f'{what}: running_mean differs'
        assert maxdiff(sync.running_var, ref.running_var) <= TOL, f'{what}: running_var differs'
        assert int(sync.num_batches_tracked) == int(ref.num_batches_tracked) == steps
    # Eval mode: the running statistics (no communication), or batch statistics without them.
    sync.eval()
    ref.eval()
    x_all = torch.randn((sum(ROWS),) + shape[1:], generator=g)
    out_ref = ref(x_all)
    assert maxdiff(sync(x_all[START:START + ROWS[R]]), out_ref[START:START + ROWS[R]]) <= TOL, f'{what}: eval differs'


check('1d', (0, 4), torch.nn.BatchNorm1d)
check('1d_seq', (0, 3, 5), torch.nn.BatchNorm1d)
check('2d', (0, 3, 4, 5), torch.nn.BatchNorm2d, steps=3)
check('3d', (0, 2, 3, 2, 2), torch.nn.BatchNorm3d)
check('momentum_none', (0, 3, 4), torch.nn.BatchNorm1d, steps=3, momentum=None)
check('affine_false', (0, 3, 4, 4), torch.nn.BatchNorm2d, affine=False)
check('untracked', (0, 3, 4, 4), torch.nn.BatchNorm2d, track_running_stats=False)

# One row per rank: too few for torch's BatchNorm on one rank, enough over all ranks.
bn = hvd.SyncBatchNorm(3)
out = bn(torch.randn(1, 3) + R)
assert out.shape == (1, 3) and torch.isfinite(out).all()
try:
    hvd.SyncBatchNorm(3)(torch.randn(3))
    raise AssertionError('1D input: no error')
except ValueError:
    pass

# Inside a model trained with DistributedOptimizer: ranks stay identical.
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3), hvd.SyncBatchNorm(4), torch.nn.ReLU(), torch.nn.Flatten(),
                            torch.nn.Linear(4 * 4 * 4, 2))
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters())
for step in range(2):
    torch.manual_seed(10 * step + R)
    opt.zero_grad()
    model(torch.randn(ROWS[R], 2, 6, 6)).pow(2).mean().backward()
    opt.step()
state = torch.cat([t.double().reshape(-1) for t in model.state_dict().values()])
every = hvd.allgather(state.unsqueeze(0))
assert torch.equal(every, every[0].expand_as(every)), 'model with SyncBatchNorm: ranks differ'

if R == 0:
    print(f'test_sync_batch_norm: OK on {N} ranks')
