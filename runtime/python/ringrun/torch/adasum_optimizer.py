"""DistributedOptimizer(op=hvd.Adasum): Horovod's delta optimizer.

Adasum combines the ranks' *updates*, not their gradients: once backward has produced a
parameter's gradient (after ``backward_passes_per_step`` passes), the wrapped optimizer steps that
parameter alone on this rank's gradient, the change it made (the delta) is allreduced with
op=Adasum, and ``step()`` sets the parameter to its value before the local step plus the
combined delta. The wrapped optimizer's state (momentum, Adam's moments) stays each rank's own,
and Adasum sees the full size of every rank's update. Between the backward pass and ``step()`` a
parameter holds its delta.

With one rank, ``DistributedOptimizer`` returns the plain wrapper instead (as Horovod does).
"""

import collections

import torch

from ringrun.torch.basics import Adasum, synchronize
from ringrun.torch.compression import Compression
from ringrun.torch.mpi_ops import allreduce_async_

_MISUSE = {
    'backward': ('Gradients were computed more than backward_passes_per_step times before call to step(). '
                 'Increase backward_passes_per_step to accumulate gradients locally.'),
    'zero_grad': ('optimizer.zero_grad() was called after loss.backward() but before optimizer.step(): the '
                  'parameters hold their local deltas until step() combines them. Call step() first.'),
    'skip': ('Skipping synchronization is not supported when using Adasum optimizer: step() itself waits for '
             'the combined deltas.'),
}


def _names_of(param_groups, named_parameters):
    """{parameter: allreduce name}: named_parameters (unique names, every parameter named), or
    ``adasum.noname.<group>.<index>``."""
    if named_parameters is None:
        return {p: f'adasum.noname.{g}.{i}' for g, group in enumerate(param_groups)
                for i, p in enumerate(group['params'])}
    named = list(named_parameters)
    if not all(isinstance(item, tuple) and len(item) == 2 for item in named):
        raise ValueError('named_parameters should be a sequence of tuples (name, parameter), usually produced by '
                         'model.named_parameters().')
    repeated = sorted(name for name, times in collections.Counter(name for name, _ in named).items() if times > 1)
    if repeated:
        raise ValueError('Parameter names in named_parameters must be unique. Found duplicates: %s. Pass the '
                         'named_parameters() of the model this optimizer trains.' % ', '.join(repeated))
    names = {p: name for name, p in named}
    missing = [p for group in param_groups for p in group['params'] if p not in names]
    if missing:
        raise ValueError('named_parameters was specified, but %d of the optimizer\'s parameters were not named. '
                         'Pass the named_parameters() of every module whose parameters it updates.' % len(missing))
    return names


class _DistributedAdasumOptimizer(torch.optim.Optimizer):
    # Copied into a class derived from the user's optimizer class (DistributedAdasumOptimizer), so
    # the wrapped optimizer's methods are reached through super(self.__class__, self).
    _ringrun_distributed = True

    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1):
        super(self.__class__, self).__init__(params)
        self._compression = compression
        self._parameter_names = _names_of(self.param_groups, named_parameters)
        self.backward_passes_per_step = backward_passes_per_step
        self._hooked = [p for group in self.param_groups for p in group['params'] if p.requires_grad]
        self._allreduce_delay = {p: backward_passes_per_step for p in self._hooked}
        # Each parameter's value before its local step: the combined delta is added to it.
        self._starting_models = {p: torch.zeros_like(p, requires_grad=False) for p in self._hooked}
        self._handles = {}    # parameter -> (handle, compression context); (None, None) while accumulating
        self._grad_accs = []  # the hooked grad accumulators: kept alive, or the hooks vanish
        for p in self._hooked:
            # The accumulator's hook fires once p.grad holds this pass's gradient.
            grad_acc = p.expand_as(p).grad_fn.next_functions[0][0]
            grad_acc.register_hook(self._make_hook(p))
            self._grad_accs.append(grad_acc)

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def _make_hook(self, p):
        def hook(*ignore):
            if self._allreduce_delay[p] <= 0:
                raise AssertionError(_MISUSE['backward'])
            self._allreduce_delay[p] -= 1
            self._handles[p] = self._allreduce_delta_async(p) if self._allreduce_delay[p] == 0 else (None, None)
        return hook

    def _allreduce_delta_async(self, p):
        """Steps the wrapped optimizer on p alone, leaves the delta in p and starts its Adasum."""
        start = self._starting_models[p]
        start.copy_(p.detach())
        kept = [group['params'] for group in self.param_groups]
        try:
            for group in self.param_groups:
                group['params'] = [p] if any(p is q for q in group['params']) else []
            super(self.__class__, self).step()
        finally:
            for group, params in zip(self.param_groups, kept):
                group['params'] = params
        p.data.sub_(start)
        compressed, ctx = self._compression.compress(p.data)
        return allreduce_async_(compressed, name=self._parameter_names[p], op=Adasum), ctx

    def synchronize(self):
        """Nothing to do: step() waits for the combined deltas (Horovod's Adasum optimizer alike)."""

    def skip_synchronize(self):
        raise AssertionError(_MISUSE['skip'])

    def step(self, closure=None):
        """Waits for every parameter's combined delta and sets the parameter to start + delta.

        Parameters whose delta was not submitted yet (no gradient on this rank, or fewer backward
        passes than backward_passes_per_step) take their local step now, so all ranks match."""
        loss = closure() if closure is not None else None
        for p in self._hooked:
            if self._handles.get(p, (None, None))[0] is None:
                self._handles[p] = self._allreduce_delta_async(p)
        handles, self._handles = self._handles, {}
        for p, (handle, ctx) in handles.items():
            delta = self._compression.decompress(synchronize(handle), ctx)
            start = self._starting_models[p]
            start.add_(delta.to(start.dtype))
            p.data.copy_(start)
            self._allreduce_delay[p] = self.backward_passes_per_step
        return loss

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError(_MISUSE['zero_grad'])
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedAdasumOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                               backward_passes_per_step=1):
    """Wraps ``optimizer`` (a torch.optim.Optimizer) into the Adasum delta optimizer; what
    ``DistributedOptimizer(optimizer, op=hvd.Adasum)`` returns on more than one rank. The result is
    an instance of a subclass of the optimizer's class, sharing its param_groups and state."""
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedAdasumOptimizer.__dict__))
    wrapped = cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step)
    wrapped.state.update(optimizer.state)
    return wrapped
