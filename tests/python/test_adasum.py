# ringrun-test: np=2,3,4 timeout=120
"""op=hvd.Adasum: the allreduce family and DistributedOptimizer against a reference computed here.

Every rank builds every rank's tensors from one seed and combines them as the runtime's tree does
(ranks 2^k.. into the first ones, then blocks of 2, 4, ..; each pair over whole tensors) in
float64. Results must match it within the dtype's rounding and be the same bits on every rank.
Also Horovod's properties (orthogonal tensors sum, parallel ones average), the
scale factors, autograd, fp16 compression, the refusals, and the delta optimizer (each rank's
local step, its delta combined by Adasum) with SGD with momentum and Adam.
"""
import math

import torch

import ringrun.torch as hvd
from adasum_reference import adasum_vectors  # beside this script

hvd.init()
R, N = hvd.rank(), hvd.size()
EPS = {torch.float64: 1e-12, torch.float32: 2.0 ** -23, torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}
LEVELS = max(1, math.ceil(math.log2(N))) + 1


def adasum_tree(tensors):
    """The reference (adasum_reference.py) in float64, in the shape of the inputs."""
    return adasum_vectors([x.detach().double().reshape(-1) for x in tensors]).reshape(tensors[0].shape)


def inputs(shape, dtype, seed):
    """Every rank's input of one case (the same list on every rank)."""
    out = []
    for r in range(N):
        g = torch.Generator().manual_seed(seed * 100 + r)
        out.append(torch.randn(shape, generator=g, dtype=torch.float64).to(dtype))
    return out


def check(got, expected, dtype, what, scale=1.0):
    err = float((got.double() - expected).norm()) / max(float(expected.norm()), 1e-300)
    tol = scale * 4 * LEVELS * EPS[dtype]
    assert err <= tol, f'{what}: relative error {err:.3g} above {tol:.3g}'
    every = hvd.allgather(got.reshape(1, -1).contiguous(), name=f'same.{what}')
    assert torch.equal(every, every[0].expand_as(every)), f'{what}: results differ across ranks'


# The allreduce family, every float dtype, lengths odd, even and below the rank count.
seed = 1
for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
    for shape in ((1,), (2,), (N + 1,), (1000,), (3, 5, 7), (65537,)):
        seed += 1
        xs = inputs(shape, dtype, seed)
        expected = adasum_tree(xs)
        what = f'{dtype}.{shape}'
        check(hvd.allreduce(xs[R], op=hvd.Adasum), expected, dtype, 'allreduce.' + what)
        check(hvd.allreduce(xs[R], op=hvd.Adasum, name='named.' + what), expected, dtype, 'named.' + what)
        mine = xs[R].clone()
        assert hvd.allreduce_(mine, op=hvd.Adasum) is mine
        check(mine, expected, dtype, 'in place.' + what)
        check(hvd.synchronize(hvd.allreduce_async(xs[R], op=hvd.Adasum)), expected, dtype, 'async.' + what)
        mine = xs[R].clone()
        assert hvd.synchronize(hvd.allreduce_async_(mine, op=hvd.Adasum)) is mine
        check(mine, expected, dtype, 'async in place.' + what)
        assert torch.equal(xs[R], inputs(shape, dtype, seed)[R]), 'the input of an out-of-place allreduce changed'

# grouped: each tensor combined on its own (per-tensor sums), not as one concatenation.
group = [inputs((17,), torch.float32, 90)[R], inputs((4, 4), torch.float32, 91)[R], inputs((3,), torch.float32, 92)[R]]
expected = [adasum_tree(inputs(t.shape, torch.float32, s)) for t, s in zip(group, (90, 91, 92))]
for got, e, i in zip(hvd.grouped_allreduce(group, op=hvd.Adasum), expected, range(3)):
    check(got, e, torch.float32, f'grouped.{i}')
copies = [t.clone() for t in group]
hvd.synchronize(hvd.grouped_allreduce_async_(copies, op=hvd.Adasum, name='grouped_inplace'))
for got, e, i in zip(copies, expected, range(3)):
    check(got, e, torch.float32, f'grouped in place.{i}')

# Scale factors (Adasum(c a, c b) = c Adasum(a, b)), a non-contiguous input, fp16 compression.
xs = inputs((8, 6), torch.float32, 99)
expected = adasum_tree(xs)
check(hvd.allreduce(xs[R], op=hvd.Adasum, prescale_factor=0.5, postscale_factor=3.0), 1.5 * expected, torch.float32,
      'scaled')
check(hvd.allreduce(xs[R].t(), op=hvd.Adasum), expected.t(), torch.float32, 'transposed')
check(hvd.allreduce(xs[R], op=hvd.Adasum, compression=hvd.Compression.fp16), expected, torch.float16,
      'fp16 compression', scale=2.0)

# Orthogonal tensors sum; parallel ones average; equal ones give themselves.
def orthogonal(r):
    v = torch.zeros(4 * N, dtype=torch.float64)
    v[r::N] = torch.arange(4, dtype=torch.float64) + r + 1
    return v


check(hvd.allreduce(orthogonal(R), op=hvd.Adasum), sum(orthogonal(r) for r in range(N)), torch.float64, 'orthogonal')
base = torch.linspace(-1, 1, 10, dtype=torch.float64)
check(hvd.allreduce(base * (R + 1), op=hvd.Adasum), base * (N + 1) / 2, torch.float64, 'parallel')
check(hvd.allreduce(base, op=hvd.Adasum), base, torch.float64, 'equal')

# Autograd: the gradient flows back through an Adasum of the output's gradient (equal: ones).
x = torch.ones(5, requires_grad=True)
hvd.allreduce(x * (R + 1), op=hvd.Adasum, name='grad').sum().backward()
assert torch.allclose(x.grad, torch.full((5,), float(R + 1))), x.grad


# Refusals, on every rank, as RuntimeErrors (what Horovod raises); the job goes on.
def refused(fragment, call):
    try:
        call()
    except NotImplementedError as e:
        assert fragment in str(e), (fragment, str(e))
        return
    raise AssertionError(f'expected NotImplementedError containing {fragment!r}')


refused('floating-point', lambda: hvd.allreduce(torch.ones(3, dtype=torch.int32), op=hvd.Adasum))
refused('floating-point', lambda: hvd.allreduce_async_(torch.ones(3, dtype=torch.int64), op=hvd.Adasum))
refused('allreduce op only', lambda: hvd.reducescatter(torch.ones(2 * N), op=hvd.Adasum))
assert torch.equal(hvd.allreduce(torch.ones(3), op=hvd.Sum), torch.full((3,), float(N)))


# The delta optimizer: each rank steps on its own batch; the reference runs all N ranks' local
# optimizers (their own states) from the common parameters and combines the deltas per tensor.
def make_model():
    torch.manual_seed(7)
    return torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))


def batch(step, micro, r):
    g = torch.Generator().manual_seed(1000 * step + 10 * micro + r)
    return torch.randn(6, 5, generator=g), torch.randn(6, 2, generator=g)


def loss_of(model, step, micro, r):
    x, y = batch(step, micro, r)
    return ((model(x) - y) ** 2).mean()


def train_and_check(make_opt, passes, what):
    model = make_model()
    opt = hvd.DistributedOptimizer(make_opt(model.parameters()), named_parameters=model.named_parameters(),
                                   op=hvd.Adasum, backward_passes_per_step=passes)
    refs = [make_model() for _ in range(N)]
    ref_opts = [make_opt(m.parameters()) for m in refs]
    start = [p.detach().double().clone() for p in model.parameters()]
    for step in range(3):
        opt.zero_grad()
        for micro in range(passes):
            loss_of(model, step, micro, R).backward()
        opt.step()
        deltas = []
        for m, o, r in zip(refs, ref_opts, range(N)):
            with torch.no_grad():
                for p, s in zip(m.parameters(), start):
                    p.copy_(s)
            o.zero_grad()
            for micro in range(passes):
                loss_of(m, step, micro, r).backward()
            o.step()
            deltas.append([p.detach() - s.float() for p, s in zip(m.parameters(), start)])
        start = [s + adasum_tree([d[i] for d in deltas]) for i, s in enumerate(start)]
        for i, (p, s) in enumerate(zip(model.parameters(), start)):
            check(p.detach(), s, torch.float32, f'{what}.step{step}.param{i}', scale=8.0)


train_and_check(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), 1, 'sgd')
train_and_check(lambda ps: torch.optim.Adam(ps, lr=0.01), 1, 'adam')
train_and_check(lambda ps: torch.optim.SGD(ps, lr=0.05), 2, 'sgd.passes2')

model = make_model()
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), op=hvd.Adasum)
assert isinstance(opt, torch.optim.SGD)
loss_of(model, 0, 0, R).backward()
for misuse in (opt.zero_grad, opt.skip_synchronize):
    try:
        misuse()
        message = None
    except AssertionError as e:
        message = str(e)
    assert message is not None and 'step()' in message, f'{misuse.__name__} between backward() and step(): {message}'
opt.synchronize()
opt.step()

hvd.shutdown()
print(f'rank {R}: adasum ok')
