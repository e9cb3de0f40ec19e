# ringrun-test: np=2,3 timeout=120
"""DistributedOptimizer: training on N ranks equals one model trained on the global batch.

Every rank builds the global batch from one seed and trains on its slice; a reference model on
every rank trains on the whole batch. Also: gradients of mixed sizes, dtypes and layouts, fp16
compression, backward_passes_per_step, clipping after synchronize(), groups, a parameter only some
ranks use, sparse_as_dense, and the errors (type and message) of misuse.
"""

import warnings

import torch

import ringrun.torch as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()
B = 4  # rows per rank
TOL = 1e-5


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def global_batch(step, micro):
    g = torch.Generator().manual_seed(1000 + 10 * step + micro)
    return torch.randn(N * B, 5, generator=g), torch.randn(N * B, 3, generator=g)


def mine(t):
    return t[R * B:(R + 1) * B]


def mse(model, x, y):
    return ((model(x) - y) ** 2).mean()


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def assert_same_on_all_ranks(model, what):
    every = hvd.allgather(flat(model).unsqueeze(0), name='check.' + what)
    assert torch.equal(every, every[0].expand_as(every)), f'{what}: parameters differ across ranks'


def assert_close(model, ref, tol, what):
    diff = (flat(model) - flat(ref)).abs().max().item()
    assert diff <= tol, f'{what}: differs from the global-batch reference by {diff}'


class Mixed(torch.nn.Module):
    """Gradients of several sizes, one in float64 and one not contiguous (a channels_last
    convolution's): the optimizer's short path and its general one in the same step."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, (1, 3), padding=(0, 1)).to(memory_format=torch.channels_last)
        self.wide = torch.nn.Linear(20, 1024)
        self.out = torch.nn.Linear(1024, 3).double()

    def forward(self, x):
        h = self.conv(x.view(-1, 1, 1, 5).expand(-1, 2, 1, 5).contiguous(memory_format=torch.channels_last))
        return self.out(torch.tanh(self.wide(h.flatten(1))).double()).float()


def make_mixed(seed):
    torch.manual_seed(seed)
    return Mixed()


def train(what, opt_cls, steps=3, passes=1, clip=None, groups=None, opt_kw=None, ref_lr_scale=1.0, make=make_model,
          **dist_kw):
    """Trains a distributed model and the global-batch reference; returns both."""
    opt_kw = opt_kw or {}
    model = make(seed=10 + R)  # a different init per rank: broadcast_parameters fixes it
    ref = make(seed=10)        # rank 0's init
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    assert_close(model, ref, 0.0, what + ' after broadcast_parameters')
    if callable(groups):
        groups = groups(model)
    opt = hvd.DistributedOptimizer(opt_cls(model.parameters(), **opt_kw),
                                   named_parameters=model.named_parameters(),
                                   backward_passes_per_step=passes, groups=groups, **dist_kw)
    assert isinstance(opt, opt_cls)
    ref_kw = dict(opt_kw)
    ref_kw['lr'] = opt_kw.get('lr', 1e-3) * ref_lr_scale
    ref_opt = opt_cls(ref.parameters(), **ref_kw)
    for step in range(steps):
        opt.zero_grad()
        ref_opt.zero_grad()
        for micro in range(passes):
            x, y = global_batch(step, micro)
            mse(model, mine(x), mine(y)).backward()
            mse(ref, x, y).backward()
        if clip is None:
            opt.step()
        else:
            opt.synchronize()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            with warnings.catch_warnings():
                warnings.simplefilter('error')  # no "step() after synchronize()" warning here
                with opt.skip_synchronize():
                    opt.step()
            torch.nn.utils.clip_grad_norm_(ref.parameters(), clip)
        ref_opt.step()
    assert_same_on_all_ranks(model, what)
    return model, ref


def expect(exc, fn, what, text=None):
    try:
        fn()
    except exc as e:
        assert text is None or text in str(e), f'{what}: message {str(e)!r} lacks {text!r}'
        return
    except Exception as e:  # noqa: BLE001 - reported as the wrong type
        raise AssertionError(f'{what}: raised {type(e).__name__}: {e}, expected {exc.__name__}')
    raise AssertionError(f'{what}: did not raise {exc.__name__}')


# Equivalence to the global batch.
model, ref = train('sgd', torch.optim.SGD, opt_kw=dict(lr=0.1, momentum=0.9))
assert_close(model, ref, TOL, 'sgd')
model, ref = train('adam', torch.optim.Adam, opt_kw=dict(lr=0.01))
assert_close(model, ref, TOL, 'adam')
model, ref = train('passes', torch.optim.SGD, passes=2, opt_kw=dict(lr=0.1))
assert_close(model, ref, TOL, 'backward_passes_per_step=2')
model, ref = train('clip', torch.optim.SGD, clip=0.05, opt_kw=dict(lr=0.1))
assert_close(model, ref, TOL, 'clipping after synchronize()')
model, ref = train('predivide', torch.optim.SGD, opt_kw=dict(lr=0.1), gradient_predivide_factor=2.0)
assert_close(model, ref, TOL, 'gradient_predivide_factor')
model, ref = train('sum', torch.optim.SGD, opt_kw=dict(lr=0.1), op=hvd.Sum, ref_lr_scale=N)
assert_close(model, ref, TOL, 'op=Sum')
model, ref = train('mixed', torch.optim.SGD, opt_kw=dict(lr=0.1, momentum=0.9), make=make_mixed)
assert not model.conv.weight.grad.is_contiguous(), 'mixed: the convolution\'s gradient is contiguous after all'
assert_close(model, ref, TOL, 'mixed sizes, dtypes and layouts')
model, ref = train('mixed_passes', torch.optim.SGD, passes=2, opt_kw=dict(lr=0.1), make=make_mixed)
assert_close(model, ref, TOL, 'mixed, backward_passes_per_step=2')

# Groups: an int, a list (ungrouped parameters form their own groups), num_groups (deprecated).
model, ref = train('groups_int', torch.optim.SGD, groups=2, opt_kw=dict(lr=0.1, momentum=0.9))
assert_close(model, ref, TOL, 'groups=2')
model, ref = train('groups_list', torch.optim.Adam, passes=2, opt_kw=dict(lr=0.01),
                   groups=lambda m: [[m[0].weight, m[2].bias], [m[0].bias]])
assert_close(model, ref, TOL, 'groups=[[...], [...]]')
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    model, ref = train('num_groups', torch.optim.SGD, num_groups=3, opt_kw=dict(lr=0.1))
assert any(issubclass(w.category, DeprecationWarning) for w in caught), 'num_groups: no DeprecationWarning'
assert_close(model, ref, TOL, 'num_groups=3')

# fp16 compression: ranks stay identical; close to the reference at float16's precision.
model, ref = train('fp16', torch.optim.SGD, passes=2, opt_kw=dict(lr=0.1), compression=hvd.Compression.fp16)
assert_close(model, ref, 1e-2, 'fp16')


# A parameter only rank 0 uses: the others submit zeros, so no rank stalls and all agree.
class Branchy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.trunk = torch.nn.Linear(5, 3)
        self.extra = torch.nn.Linear(3, 3)

    def forward(self, x):
        out = self.trunk(x)
        return self.extra(out) if R == 0 else out


for groups in (None, 1):  # with groups, the group holding the unused parameter is zero-filled
    branchy = Branchy()
    before = branchy.extra.weight.detach().clone()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(branchy.parameters(), lr=0.1),
                                   named_parameters=branchy.named_parameters(), groups=groups)
    x, y = global_batch(0, 0)
    mse(branchy, mine(x), mine(y)).backward()
    opt.step()
    assert_same_on_all_ranks(branchy, f'unused parameter, groups={groups}')
    assert not torch.equal(branchy.extra.weight, before), 'unused parameter: rank 0 gradient not applied'


# Sparse gradients: refused by default, reduced as dense with sparse_as_dense=True.
def embedding_model(sparse):
    torch.manual_seed(4)
    return torch.nn.Embedding(10, 3, sparse=sparse)


ids = torch.arange(N * B) % 10
emb, emb_ref = embedding_model(True), embedding_model(False)
opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=0.5), named_parameters=emb.named_parameters(),
                               sparse_as_dense=True)
ref_opt = torch.optim.SGD(emb_ref.parameters(), lr=0.5)
for _ in range(2):
    opt.zero_grad()
    ref_opt.zero_grad()
    emb(mine(ids)).pow(2).mean().backward()
    emb_ref(ids).pow(2).mean().backward()
    opt.step()
    ref_opt.step()
diff = (emb.weight - emb_ref.weight).abs().max().item()
assert diff <= TOL, f'sparse_as_dense: differs from the reference by {diff}'
# Sparse as sparse (Horovod's default): the rows' indices and values gathered from every rank and
# summed, so each rank may touch other rows (here: its own ids only).
for kind in ('sgd', 'sparse_adam'):
    emb, emb_ref = embedding_model(True), embedding_model(True)
    make = (lambda p: torch.optim.SGD(p, lr=0.5)) if kind == 'sgd' else (lambda p: torch.optim.SparseAdam(list(p), lr=0.1))
    opt = hvd.DistributedOptimizer(make(emb.parameters()), named_parameters=emb.named_parameters())
    ref_opt = make(emb_ref.parameters())
    for _ in range(2):
        opt.zero_grad()
        ref_opt.zero_grad()
        emb(mine(ids)).pow(2).mean().backward()
        assert emb.weight.grad.is_sparse
        emb_ref(ids).pow(2).mean().backward()
        opt.step()
        ref_opt.step()
    diff = (emb.weight - emb_ref.weight).abs().max().item()
    assert diff <= TOL, f'sparse gradients ({kind}): differ from the reference by {diff}'
# hvd.sparse_allreduce_async returns a function that gives the reduced sparse tensor, as Horovod's.
dense = torch.zeros(6, 3)
dense[R % 6] = float(R + 1)
handle = hvd.sparse_allreduce_async(dense.to_sparse(), name='sparse.direct', op=hvd.Sum)
assert torch.equal(handle().to_dense(), hvd.allreduce(dense, op=hvd.Sum)), 'sparse_allreduce_async'


# Errors raised by DistributedOptimizer's arguments.
m = make_model(0)
sgd = lambda: torch.optim.SGD(m.parameters(), lr=0.1)  # noqa: E731
named = list(m.named_parameters())
expect(ValueError, lambda: hvd.DistributedOptimizer(sgd(), named_parameters=[(n if i else named[1][0], p) for i, (n, p) in
                                                                             enumerate(named)]), 'duplicate names', 'unique')
expect(ValueError, lambda: hvd.DistributedOptimizer(sgd(), named_parameters=named[1:]), 'unnamed parameter', 'not named')
expect(ValueError, lambda: hvd.DistributedOptimizer(sgd(), named_parameters=[p for _, p in named]), 'not tuples', 'tuples')
expect(ValueError, lambda: hvd.DistributedOptimizer(sgd(), op=hvd.Sum, gradient_predivide_factor=2.0), 'predivide with Sum',
       'gradient_predivide_factor')
expect(ValueError, lambda: hvd.DistributedOptimizer(sgd(), op=hvd.Adasum, gradient_predivide_factor=2.0),
       'predivide with Adasum', 'gradient_predivide_factor')
expect(ValueError, lambda: hvd.DistributedOptimizer(sgd(), groups=-1), 'groups=-1', 'groups')
other = make_model(0)  # hooks stay on a model's parameters: keep this optimizer off m's
hvd.DistributedOptimizer(torch.optim.SGD(other.parameters(), lr=0.1), process_set=hvd.global_process_set)

# Misuse during training: backward once too often, zero_grad() before step().
opt = hvd.DistributedOptimizer(sgd(), named_parameters=m.named_parameters())
x, y = global_batch(0, 0)
mse(m, mine(x), mine(y)).backward()
expect(AssertionError, lambda: mse(m, mine(x), mine(y)).backward(), 'backward twice', 'backward_passes_per_step')
opt.synchronize()  # the first pass's allreduces are still pending on every rank
opt.zero_grad()
mse(m, mine(x), mine(y)).backward()
expect(AssertionError, opt.zero_grad, 'zero_grad before step', 'zero_grad')
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    opt.synchronize()
    opt.step()  # after synchronize() without skip_synchronize(): works, with Horovod's warning
assert any('skip_synchronize' in str(w.message) for w in caught), 'no warning for step() after synchronize()'
assert_same_on_all_ranks(m, 'after misuse')

if R == 0:
    print(f'test_optimizer: OK on {N} ranks')
