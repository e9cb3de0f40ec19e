# ringrun-test: np=2,3 timeout=120
"""broadcast_parameters, broadcast_optimizer_state, broadcast_object and allgather_object."""

import torch

import ringrun.torch as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()
ROOT = N - 1  # not rank 0, so that a root_rank ignored somewhere shows


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6), torch.nn.Linear(6, 2))


def all_equal(t, what):
    every = hvd.allgather(t.detach().reshape(1, -1).double(), name='check.' + what)
    assert torch.equal(every, every[0].expand_as(every)), f'{what}: differs across ranks'


def flat_state(model):
    return torch.cat([t.detach().double().reshape(-1) for t in model.state_dict().values()])


# broadcast_parameters: a state_dict (buffers too, int64 num_batches_tracked included), named
# parameters and plain parameters (generators), from a root other than 0.
model = make_model(seed=R)
model(torch.randn(8, 4))  # different running stats per rank
expected = hvd.broadcast_object(flat_state(model) if R == ROOT else None, root_rank=ROOT)
hvd.broadcast_parameters(model.state_dict(), root_rank=ROOT)
assert torch.equal(flat_state(model), expected), 'broadcast_parameters(state_dict): not the root\'s values'
for kind, params in (('named_parameters', lambda m: m.named_parameters()), ('parameters', lambda m: m.parameters())):
    model = make_model(seed=100 + R)
    hvd.broadcast_parameters(params(model), root_rank=0)
    all_equal(torch.cat([p.detach().reshape(-1) for p in model.parameters()]), kind)
    assert all(p.requires_grad for p in model.parameters()), f'{kind}: parameters lost requires_grad'
try:
    hvd.broadcast_parameters(42, root_rank=0)
    raise AssertionError('broadcast_parameters(42): no error')
except ValueError:
    pass


# broadcast_optimizer_state: the root has trained (Adam state, its own lr); the others are fresh.
def adam_case(wrap):
    model = make_model(seed=7)
    opt = torch.optim.Adam(model.parameters(), lr=0.01 * (R + 1), betas=(0.8, 0.9))
    if R == ROOT:
        for i in range(3):
            torch.manual_seed(i)
            model(torch.randn(8, 4)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
        opt.state[model[0].weight]['note'] = 'from root'  # non-tensor state travels too
        opt.state[model[0].bias]['count'] = 3
    if wrap:
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    before = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    hvd.broadcast_optimizer_state(opt, root_rank=ROOT)
    after = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert torch.equal(before, after), 'broadcast_optimizer_state changed the parameters'
    assert opt.param_groups[0]['lr'] == 0.01 * (ROOT + 1), 'lr not the root\'s'
    assert opt.param_groups[0]['betas'] == (0.8, 0.9) and isinstance(opt.param_groups[0]['betas'], tuple)
    assert opt.state[model[0].weight]['note'] == 'from root' and opt.state[model[0].bias]['count'] == 3
    for i, p in enumerate(model.parameters()):
        state = opt.state[p]
        assert float(state['step']) == 3.0, f'param {i}: step {state["step"]} is not the root\'s 3'
        for key in ('exp_avg', 'exp_avg_sq'):
            assert state[key].abs().sum() > 0, f'param {i}: {key} is still zero'
            all_equal(state[key], f'{key}.{i}.{wrap}')
    # With the root's parameters too, the optimizers keep training identically.
    hvd.broadcast_parameters(model.state_dict(), root_rank=ROOT)
    torch.manual_seed(9)
    model(torch.randn(8, 4)).pow(2).mean().backward()
    opt.step()
    all_equal(torch.cat([p.detach().reshape(-1) for p in model.parameters()]), f'after step.{wrap}')


adam_case(wrap=False)
adam_case(wrap=True)  # a DistributedOptimizer's zero step must not allreduce (only non-roots take it)

# A stateless optimizer (SGD without momentum): options only.
model = make_model(seed=7)
sgd = torch.optim.SGD(model.parameters(), lr=0.1 * (R + 1))
hvd.broadcast_optimizer_state(sgd, root_rank=0)
assert sgd.param_groups[0]['lr'] == 0.1

# Sparse embeddings (Horovod's model= argument): a fresh SparseAdam takes its zero step with sparse
# gradients (it refuses dense ones); SGD's momentum of a sparse embedding is a sparse tensor, and it
# reaches every rank; afterwards the ranks train identically.
def sparse_case(make_optimizer, pass_model, what):
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4, sparse=True))
    opt = make_optimizer(model)
    if R == ROOT:
        for i in range(2):
            model(torch.tensor([i, i + 3])).pow(2).sum().backward()
            opt.step()
            opt.zero_grad()
    hvd.broadcast_optimizer_state(opt, root_rank=ROOT, model=model if pass_model else None)
    hvd.broadcast_parameters(model.state_dict(), root_rank=ROOT)
    state = opt.state[model[0].weight]
    for key, value in state.items():
        if torch.is_tensor(value):
            all_equal(value.to_dense() if value.is_sparse else value, f'{what}.{key}')
    # The zero step's gradients stay (as in Horovod), dense ones too where model= was not given (a
    # later sparse gradient would add into them): cleared to None, as torch 2's zero_grad() does.
    opt.zero_grad(set_to_none=True)
    model(torch.tensor([1, 7])).pow(2).sum().backward()
    opt.step()
    all_equal(model[0].weight, f'{what}.after step')
    return state


state = sparse_case(lambda m: torch.optim.SparseAdam(m.parameters(), lr=0.1), False, 'SparseAdam')
assert float(state['step']) == 3.0, state['step']
for pass_model in (True, False):
    state = sparse_case(lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), pass_model,
                        f'SGD.{pass_model}')
    assert state['momentum_buffer'].is_sparse

# Optimizers built differently on one rank (0, never the root here): every rank raises the same ValueError (none is left
# waiting in a broadcast the others never join), and the next collective works.
def mismatch_case(make_optimizer, needle):
    model = make_model(seed=11)
    opt = make_optimizer(model)
    try:
        hvd.broadcast_optimizer_state(opt, root_rank=ROOT)
    except ValueError as e:
        assert needle in str(e) and 'build the optimizer the same way' in str(e), str(e)
    else:
        raise AssertionError(f'broadcast_optimizer_state took mismatched optimizers ({needle})')
    all_equal(torch.tensor([1.0]), 'after mismatch ' + needle)


def odd_groups(model):
    params = list(model.parameters())
    groups = [{'params': params[:2]}, {'params': params[2:]}] if R == 0 else [{'params': params}]
    return torch.optim.SGD(groups, lr=0.1)


mismatch_case(odd_groups, 'rank 0 has 2 param groups')
mismatch_case(lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9 if R != 0 else 0.0),
              "rank 0 has no 'momentum_buffer' state tensor")

# broadcast_object: the others pass None (another type); a large object; names.
obj = {'epoch': 5, 'name': 'ringrun', 'tensor': torch.arange(3), 'blob': bytes(range(256)) * 4096} if R == ROOT else None
got = hvd.broadcast_object(obj, root_rank=ROOT)
assert got['epoch'] == 5 and got['name'] == 'ringrun' and torch.equal(got['tensor'], torch.arange(3))
assert got['blob'] == bytes(range(256)) * 4096
assert hvd.broadcast_object(R * 10, root_rank=1 % N, name='int') == (1 % N) * 10

# allgather_object: objects of different sizes and types per rank.
mine = {'rank': R, 'text': 'x' * (1000 * R + 1)} if R % 2 == 0 else [R] * (R + 5)
every = hvd.allgather_object(mine)
assert len(every) == N
for r, o in enumerate(every):
    want = {'rank': r, 'text': 'x' * (1000 * r + 1)} if r % 2 == 0 else [r] * (r + 5)
    assert o == want, f'allgather_object: rank {r}\'s object is wrong'
assert hvd.allgather_object(R, name='ranks') == list(range(N))

if R == 0:
    print(f'test_functions: OK on {N} ranks')
