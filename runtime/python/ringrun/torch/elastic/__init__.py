"""ringrun.torch.elastic: Horovod's elastic training API on ringrun's runtime.

Start the job in elastic mode, e.g. ``ringrun -np 4 --min-np 2 python3 train.py`` (see
``--max-np``, ``--reset-limit``, ``--blacklist-cooldown-range``, ``--elastic-timeout``), and write
the training as in Horovod::

    import ringrun.torch as hvd

    hvd.init()
    model = ...
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                         named_parameters=model.named_parameters())
    sampler = hvd.elastic.ElasticSampler(dataset)
    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        ...  # train from state.epoch / the sampler's position, state.commit() every few batches

    train(state)

What happens:

- A rank dies (or a collective fails): every other rank's collective raises ``InternalError``;
  ``run`` restores the last commit, joins the next world (``_reset()``: same process, possibly
  another rank and size), broadcasts rank 0's state and calls ``train`` again.
- The launcher adds processes (a failed slot refilled after ``--blacklist-cooldown-range``): at
  the next ``commit()`` every rank raises ``HostsUpdatedInterrupt``; the new world is formed and
  rank 0's state is broadcast to the newcomers.
- A process gets SIGTERM inside ``run``: it leaves at its next ``commit()`` and exits with status
  0; the others go on without it, without a rollback.
- Any other ``InternalError`` (e.g. ranks that name their ops differently) is handled like a
  failure too: the same members re-form, as in Horovod; ``--reset-limit`` bounds the retries.

``os.environ``'s rank variables keep their values from the process's start: use ``rank()`` and
``size()``, which follow the resets. Outside elastic mode ``run`` syncs the state and calls the
function once (failures raise as usual) and ``commit()`` only saves.

Differences from Horovod: ``TorchState.sync()`` also makes what it received the restore point;
``TorchState.reset()`` repartitions ElasticSamplers also when the sync is skipped; the ranks agree
on host updates with a MAX allreduce (``ringrun.elastic.check``), not a broadcast from rank 0.
"""

from ringrun.common.elastic import run_fn
from ringrun.torch import basics, submission
from ringrun.torch.basics import HostsUpdatedInterrupt, InternalError  # noqa: F401 - horovod.torch.elastic's names
from ringrun.torch.elastic.sampler import ElasticSampler
from ringrun.torch.elastic.state import ObjectState, State, TorchState

__all__ = ['run', 'State', 'ObjectState', 'TorchState', 'ElasticSampler', 'HostsUpdatedInterrupt']


def run(func):
    """Decorates ``func(state, *args, **kwargs)``, the training, to survive changes of the world.

    The wrapper syncs ``state`` from rank 0, then calls ``func``. When ``func`` raises
    ``InternalError`` (a peer died), the state goes back to its last commit; when it raises
    ``HostsUpdatedInterrupt`` (from ``state.commit()``), the state stays. Either way the process
    joins the next world (pending ops are dropped and automatic names restart, as in a newcomer),
    ``state.on_reset()`` runs the reset callbacks, the state is synced again (unless only processes
    left) and ``func`` is called again. Returns ``func``'s result.

    A process that is not in the next world (it left on SIGTERM, or the job ended) raises
    ``SystemExit(0)``. Do not call collectives before ``func`` that newcomers would not make: a
    newcomer's first collectives are the sync's.
    """
    return run_fn(func, before_reset=(basics._drop_pending, submission.reset_names))
