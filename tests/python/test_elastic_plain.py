# ringrun-test: np=2 timeout=60
"""ringrun.torch.elastic outside elastic mode (plain `ringrun -np 2`), and its parts' semantics.

- run() syncs the state from rank 0 and calls the function once; an InternalError is re-raised
  (no reset outside elastic mode); commit() does no collective (only rank 0 commits here).
- ObjectState / TorchState: restore() goes back to the last commit (attributes, model, optimizer,
  LR scheduler, sampler); sync() gives every rank rank 0's values.
- ElasticSampler: the ranks' shares are disjoint and cover the dataset; record_batch, set_epoch
  and load_state_dict move its position as Horovod's does.
- HostsUpdatedInterrupt is a RuntimeError with skip_sync, exported by ringrun.torch.
"""
import torch

import ringrun.torch as hvd
from ringrun import _ringrun

hvd.init()
r, n = hvd.rank(), hvd.size()
assert not _ringrun.elastic_enabled() and _ringrun.epoch() == 0
assert issubclass(hvd.HostsUpdatedInterrupt, RuntimeError)
assert hvd.elastic.HostsUpdatedInterrupt is hvd.HostsUpdatedInterrupt
assert hvd.HostsUpdatedInterrupt(skip_sync=True).skip_sync and not hvd.HostsUpdatedInterrupt().skip_sync

# ElasticSampler.
data = list(range(10))
sampler = hvd.elastic.ElasticSampler(data, shuffle=True, seed=5)
shares = hvd.allgather_object(list(sampler))
assert len(sampler) == 5 and sorted(i for s in shares for i in s) == data, shares
sampler.record_batch(0, 2)
assert sampler.processed_num == 2 * n
sampler.load_state_dict(sampler.state_dict())
shares = hvd.allgather_object(list(sampler))
assert len(sampler) == 3 and sorted(i for s in shares for i in s) == sorted(set(i for s in shares for i in s)), shares
sampler.set_epoch(1)
assert sampler.processed_num == 0 and sampler.epoch == 1 and len(sampler) == 5

# TorchState: a model, optimizer, scheduler and sampler that differ per rank, synced by run().
torch.manual_seed(100 + r)
model = torch.nn.Linear(3, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * (r + 1), momentum=0.5)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
sampler = hvd.elastic.ElasticSampler(data, shuffle=False)
sampler.record_batch(0, r + 1)
state = hvd.elastic.TorchState(model, optimizer, scheduler=scheduler, sampler=sampler, epoch=r, note=f"rank{r}")
resets = []
state.register_reset_callbacks([lambda: resets.append(1)])


@hvd.elastic.run
def train(state, factor):
    return factor * state.epoch, state.note


assert train(state, 3) == (0, "rank0"), "run() syncs rank 0's state, then calls the function"
weights = hvd.allgather_object(model.weight.detach().clone())
assert all(torch.equal(w, weights[0]) for w in weights), "the model was broadcast from rank 0"
assert optimizer.param_groups[0]["lr"] == 0.1, ("rank 0's optimizer options", optimizer.param_groups)
assert sampler.processed_num == n, ("rank 0's sampler position", sampler.processed_num)
assert not resets

# commit / restore.
before = model.weight.detach().clone()
model(torch.ones(4, 3)).sum().backward()
optimizer.step()
scheduler.step()
state.epoch, state.note = 7, "changed"
sampler.record_batch(1, 1)
state.restore()
assert torch.equal(model.weight, before), "restore() goes back to the synced model"
buffers = [v["momentum_buffer"] for v in optimizer.state_dict()["state"].values()]
assert buffers and all(b is not None and not b.any() for b in buffers), ("the synced (zero) momentum", buffers)
assert state.epoch == 0
assert state.note == "rank0" and scheduler.last_epoch == 0 and sampler.processed_num == n
state.epoch = 5
if r == 0:  # commit() checks for host updates only in elastic mode: no collective here
    for _ in range(3):
        state.commit()
hvd.barrier()
state.restore()
assert state.epoch == (5 if r == 0 else 0)


@hvd.elastic.run
def failing(state):
    raise hvd.InternalError("a peer died")


try:
    failing(state)
    raise AssertionError("InternalError was swallowed outside elastic mode")
except hvd.InternalError:
    pass
assert not resets
print(f"rank {r}: elastic outside elastic mode ok")
