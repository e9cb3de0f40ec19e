"""DistributedOptimizer: horovod.torch's optimizer wrapper over ringrun's allreduce.

Gradients are allreduced as they become ready during ``loss.backward()`` (one named async
allreduce per parameter, or per group with ``groups``), overlapping communication with the rest
of the backward pass; ``step()`` waits for them and applies the wrapped optimizer's update.
"""

import warnings
from contextlib import contextmanager

import torch

from ringrun import _ringrun
from ringrun.torch.basics import Adasum, Average, Sum, global_process_set, size, synchronize
from ringrun.torch.adasum_optimizer import DistributedAdasumOptimizer
from ringrun.torch.compression import Compression
from ringrun.torch.functions import broadcast_object
from ringrun.torch.reduce_ops import allreduce_async_, gradient_allreduce_async_, grouped_allreduce_async_
from ringrun.torch.sparse import sparse_allreduce_async
from ringrun.torch.submission import op_name

__all__ = ['DistributedOptimizer']

_BACKWARD_TOO_OFTEN = ("Gradients were computed more than backward_passes_per_step times before "
                       "call to step(). Increase backward_passes_per_step to accumulate gradients "
                       "locally.")
_ZERO_GRAD_PENDING = ("optimizer.zero_grad() was called after loss.backward() but before "
                      "optimizer.step() or optimizer.synchronize(). This is prohibited as it can "
                      "cause a race condition.")


def _hook_gradient(p, hook):
    """Calls hook once p.grad holds a backward pass's gradient (accumulated). torch >= 2.1 says so
    itself (register_post_accumulate_grad_hook); before, the hook goes on the parameter's
    gradient accumulator, which must be kept alive. Returns what keeps the hook registered."""
    if hasattr(p, 'register_post_accumulate_grad_hook'):
        return p.register_post_accumulate_grad_hook(hook)
    grad_acc = p.expand_as(p).grad_fn.next_functions[0][0]
    grad_acc.register_hook(hook)
    return grad_acc


def _split_list(items, n):
    """Split items into n contiguous parts whose lengths differ by at most one."""
    d, r = divmod(len(items), n)
    return [items[i * d + min(i, r):(i + 1) * d + min(i + 1, r)] for i in range(n)]


class _DistributedOptimizer(torch.optim.Optimizer):
    # Methods here are copied into a class derived from the user's optimizer class (see
    # DistributedOptimizer), so they reach the wrapped optimizer through super(self.__class__, self).
    _ringrun_distributed = True

    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1,
                 op=Average, gradient_predivide_factor=1.0, groups=None, sparse_as_dense=False,
                 process_set=global_process_set):
        super(self.__class__, self).__init__(params)
        self._compression = compression
        self.process_set = process_set

        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            named_parameters = [('allreduce.noname.%d.%d' % (i, j), v)
                                for i, group in enumerate(self.param_groups)
                                for j, v in enumerate(group['params'])]
        if any(not isinstance(p, tuple) for p in named_parameters):
            raise ValueError('named_parameters should be a sequence of tuples (name, parameter), '
                             'usually produced by model.named_parameters().')
        names = [k for k, _ in named_parameters]
        dups = sorted({k for k in names if names.count(k) > 1})
        if dups:
            raise ValueError('Parameter names in named_parameters must be unique. Found duplicates: '
                             '%s. Pass model.named_parameters() of the model this optimizer '
                             'trains (with two optimizers, give their parameters distinct names).'
                             % ', '.join(dups))
        all_ids = {id(v) for group in self.param_groups for v in group['params']}
        unnamed = all_ids - {id(v) for _, v in named_parameters}
        if unnamed:
            raise ValueError('named_parameters was specified, but %d of the optimizer\'s parameters '
                             'were not named (Python object ids: %s). Pass the named_parameters() '
                             'of every module whose parameters the optimizer updates.'
                             % (len(unnamed), ', '.join(str(i) for i in sorted(unnamed))))

        self._parameter_names = {v: k for k, v in sorted(named_parameters, key=lambda kv: kv[0])}
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {v: backward_passes_per_step for _, v in named_parameters}
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        # The common case (no compression, Average or Sum, no predivision) submits through
        # gradient_allreduce_async_ under names made here once.
        self._lean = (compression is Compression.none and op in (Average, Sum)
                      and gradient_predivide_factor == 1.0)
        self._engine_names = {v: op_name(_ringrun.ALLREDUCE, k) for k, v in named_parameters}

        self._handles = {}        # parameter, or tuple of parameters for a group -> (handle, ctx)
        self._grad_accs = []      # the hooked grad accumulators: kept alive, or the hooks vanish
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True

        if groups is not None:
            if isinstance(groups, list):
                seen = set()
                for group in groups:
                    for p in group:
                        if not isinstance(p, torch.Tensor):
                            raise ValueError('groups must be an int or a list of lists of '
                                             'parameters (torch.Tensor); got a %s in a group.'
                                             % type(p).__name__)
                        if id(p) in seen:
                            raise ValueError('A parameter can only appear once in groups.')
                        seen.add(id(p))
            elif not (isinstance(groups, int) and groups > 0):
                raise ValueError('groups should be a positive integer (the number of groups) or a '
                                 'list of lists of parameters; got %r.' % (groups,))
        self._groups = groups
        self._p_to_group = {}
        self._group_counts = {}

        # In elastic mode a world of one may grow later: hook from the start (as Horovod does). A
        # rank outside the optimizer's process set trains alone.
        if (size() > 1 or _ringrun.elastic_enabled()) and process_set.included() is not False:
            self._register_hooks()

    def load_state_dict(self, *args, **kwargs):
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        for group in self._group_counts:
            self._group_counts[group] = 0
        super(self.__class__, self).load_state_dict(*args, **kwargs)

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def _register_hooks(self):
        if self._groups is not None:
            self._form_groups()
        for group in self.param_groups:
            for p in group['params']:
                if p.requires_grad:
                    self._requires_update.add(p)
                    self._grad_accs.append(_hook_gradient(p, self._make_hook(p)))

    def _hooked_params(self):
        # In the optimizer's parameter order, the same on every rank.
        return [p for group in self.param_groups for p in group['params']
                if p in self._requires_update]

    def _form_groups(self):
        p_list = [p for group in self.param_groups for p in group['params'] if p.requires_grad]
        # Rank 0's parameter order decides the groups, so every rank forms the same ones.
        order = broadcast_object([self._parameter_names[p] for p in p_list], root_rank=0,
                                 name='DistributedOptimizer.groups')
        position = {name: i for i, name in enumerate(order)}
        p_list.sort(key=lambda p: position[self._parameter_names[p]])
        if isinstance(self._groups, list):
            wanted = {id(p) for p in p_list}
            p_groups = [[p for p in g if id(p) in wanted] for g in self._groups]
            grouped = {id(p) for g in p_groups for p in g}
            p_groups = [g for g in p_groups if g] + [[p] for p in p_list if id(p) not in grouped]
        else:
            p_groups = [g for g in _split_list(p_list, self._groups) if g]
        for g in p_groups:
            g = tuple(g)
            for p in g:
                self._p_to_group[p] = g
            self._group_counts[g] = 0

    def _scale_factors(self):
        if self.op == Average:
            # The runtime divides by size() for Average; the predivide factor splits that
            # division into a part before the sum and a part after it.
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _grad_to_send(self, p):
        if p.grad is None:
            # No gradient here (e.g. a branch this rank skipped), but other ranks may have one:
            # submit zeros so every rank submits the same names.
            p.grad = torch.zeros_like(p)
        return p.grad.to_dense() if p.grad.is_sparse else p.grad

    def _allreduce_grad_async(self, p):
        if self._lean and p.grad is not None:
            handle = gradient_allreduce_async_(p.grad, self._engine_names[p], self.op, self.process_set)
            if handle is not None:
                return handle, (p.grad, None)
        name = self._parameter_names[p]
        if p.grad is not None and p.grad.is_sparse and not self.sparse_as_dense:
            # Rows of an embedding that ranks touch differently: gathered, summed when coalesced.
            return sparse_allreduce_async(p.grad, name=name, op=self.op, process_set=self.process_set), (None, None)
        compressed, ctx = self._compression.compress(self._grad_to_send(p))
        prescale, postscale = self._scale_factors()
        handle = allreduce_async_(compressed, name=name, op=self.op, prescale_factor=prescale,
                                  postscale_factor=postscale, process_set=self.process_set)
        return handle, (compressed, ctx)

    def _grouped_allreduce_grad_async(self, ps):
        compressed, ctxs = zip(*[self._compression.compress(self._grad_to_send(p)) for p in ps])
        prescale, postscale = self._scale_factors()
        handle = grouped_allreduce_async_(list(compressed), name=self._parameter_names[ps[0]],
                                          op=self.op, prescale_factor=prescale,
                                          postscale_factor=postscale, process_set=self.process_set)
        return handle, (compressed, ctxs)

    def _make_hook(self, p):
        def hook(*ignore):
            if self._allreduce_delay[p] <= 0:
                # Already submitted (alone or in its group); synchronize() restarts the countdown.
                raise AssertionError(_BACKWARD_TOO_OFTEN)
            assert not p.grad.requires_grad
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] > 0:
                self._handles[p] = (None, None)  # more local passes to accumulate first
                return
            if self._groups is None:
                self._handles[p] = self._allreduce_grad_async(p)
                return
            group = self._p_to_group[p]
            self._group_counts[group] += 1
            self._handles.setdefault(p, (None, None))
            if self._group_counts[group] == len(group):
                self._submit_group(group)
        return hook

    def _submit_group(self, group):
        self._handles[group] = self._grouped_allreduce_grad_async(group)
        for gp in group:
            self._handles.pop(gp, None)
        self._group_counts[group] = 0

    def synchronize(self):
        """Wait for every gradient's allreduce and write the reduced gradients into p.grad.

        Parameters whose allreduce was not submitted yet (no gradient on this rank, or fewer
        backward passes than backward_passes_per_step) are submitted now, so all ranks match."""
        if self._groups is not None:
            for group in self._group_counts:
                if group not in self._handles:
                    self._submit_group(group)
        else:
            for p in self._hooked_params():
                if self._handles.get(p, (None, None))[0] is None:
                    self._handles[p] = self._allreduce_grad_async(p)

        handles, self._handles = self._handles, {}
        for key, (handle, (_, ctx)) in handles.items():
            if isinstance(key, tuple):
                for gp, output, gctx in zip(key, synchronize(handle), ctx):
                    self._set_grad(gp, self._compression.decompress(output, gctx))
            elif callable(handle):  # a sparse gradient's gather
                self._set_grad(key, handle())
            else:
                self._set_grad(key, self._compression.decompress(synchronize(handle), ctx))
        self._synchronized = True

    def _set_grad(self, p, reduced):
        self._allreduce_delay[p] = self.backward_passes_per_step
        if p.grad.is_sparse:
            p.grad = reduced if reduced.is_sparse else reduced.to_sparse()
        elif reduced is not p.grad:
            p.grad.copy_(reduced)

    @contextmanager
    def skip_synchronize(self):
        """Make step() skip its synchronize(), for code that calls synchronize() itself:

            optimizer.synchronize()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            with optimizer.skip_synchronize():
                optimizer.step()
        """
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn('optimizer.step() called without optimizer.skip_synchronize() '
                              'context after optimizer.synchronize(). This can cause training '
                              'slowdown. You may want to consider using '
                              'optimizer.skip_synchronize() context if you use '
                              'optimizer.synchronize() in your code.')
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError(_ZERO_GRAD_PENDING)
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False, process_set=global_process_set):
    """Wrap a torch.optim.Optimizer so that step() applies gradients averaged over all ranks.

    Each gradient's allreduce starts as soon as backward() has computed it; step() waits for
    them. To change gradients before the update (clipping, AMP unscaling), call
    ``optimizer.synchronize()`` first and ``optimizer.step()`` inside
    ``with optimizer.skip_synchronize():``.

    Arguments:
        optimizer: the optimizer to wrap; the result is an instance of a subclass of its class,
            sharing its param_groups and starting from its state.
        named_parameters: ``model.named_parameters()``; the names identify each allreduce, so
            they must be unique and cover every parameter of the optimizer. Default:
            ``allreduce.noname.<group>.<index>``.
        compression: ``Compression.none`` or ``Compression.fp16`` (gradients sent as float16).
        backward_passes_per_step: backward passes accumulated locally before each step().
        op: ``Average`` (default), ``Sum``, ``Min``, ``Max``, ``Product``, or ``Adasum``: on more
            than one rank Horovod's delta optimizer (adasum_optimizer.py; groups and
            sparse_as_dense do not apply).
        gradient_predivide_factor: with op=Average, gradients are scaled by
            1/gradient_predivide_factor before the sum and gradient_predivide_factor/size after.
        num_groups: deprecated spelling of an int ``groups``.
        groups: an int (that many groups of consecutive parameters) or a list of lists of
            parameters; each group is reduced by one grouped allreduce once all its gradients
            are ready. Default: one allreduce per parameter.
        sparse_as_dense: reduce sparse gradients (e.g. ``Embedding(sparse=True)``) as dense.
        process_set: the ranks whose gradients are averaged (default: every rank); a rank outside
            the set steps on its own gradients.
    """
    if process_set is None:
        process_set = global_process_set
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError('gradient_predivide_factor not supported with op != Average '
                         '(got gradient_predivide_factor=%r); use op=hvd.Average or leave the '
                         'factor at 1.0.' % (gradient_predivide_factor,))
    if num_groups != 0:
        warnings.warn('Parameter `num_groups` has been replaced by `groups`.', DeprecationWarning)
        if groups is None:
            groups = num_groups
    if getattr(optimizer, '_ringrun_distributed', False):
        raise ValueError('optimizer is already a DistributedOptimizer; wrap the plain '
                         'torch.optim optimizer once.')
    if op == Adasum and size() > 1:
        return DistributedAdasumOptimizer(optimizer, named_parameters, compression, backward_passes_per_step)
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    wrapped = cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
                  op, gradient_predivide_factor, groups, sparse_as_dense, process_set)
    # Unlike Horovod, keep the state the optimizer already has (e.g. loaded from a checkpoint).
    wrapped.state.update(optimizer.state)
    return wrapped
