"""Model, optimizer and object broadcasts: horovod.torch's functions over ringrun's collectives."""

import torch

from ringrun.common.objects import allgather_object, broadcast_object  # noqa: F401 - Horovod's names here
from ringrun.torch.basics import global_process_set, rank, synchronize
from ringrun.torch.gather_ops import broadcast_async_

__all__ = ['broadcast_parameters', 'broadcast_optimizer_state', 'broadcast_object',
           'allgather_object']


def broadcast_parameters(params, root_rank):
    """Overwrite every rank's parameters with root_rank's, in place.

    Arguments:
        params: ``model.state_dict()`` (a dict of tensors), ``model.named_parameters()``
            (name, tensor) pairs, or ``model.parameters()`` (tensors).
        root_rank: the rank whose values every rank receives.
    """
    if isinstance(params, dict):
        params = sorted(params.items())
    elif isinstance(params, (list, tuple)) or hasattr(params, '__iter__'):
        params = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError('broadcast_parameters: params must be model.state_dict(), '
                         'model.named_parameters() or model.parameters(); got %s.'
                         % type(params).__name__)
    handles = []
    for i, (name, p) in enumerate(params):
        if not torch.is_tensor(p):
            raise ValueError('broadcast_parameters: %r is a %s, not a tensor.'
                             % (name if name is not None else i, type(p).__name__))
        # Names match the ops across ranks; unnamed tensors are named by position.
        op_name = 'broadcast_parameters.%s' % (name if name is not None else i)
        # .data: an in-place write to a leaf that requires grad must bypass autograd.
        handles.append(broadcast_async_(p.data, root_rank, name=op_name))
    for handle in handles:
        synchronize(handle)


def _sparse_parameters(optimizer, model):
    """The parameters whose gradients are sparse in training, so that the zero step gives them
    sparse ones too (Horovod's rule): every one of a SparseAdam, which refuses dense gradients,
    and, under SGD, those of the model's sparse Embedding and EmbeddingBag modules."""
    if isinstance(optimizer, torch.optim.SparseAdam):
        return {id(p) for group in optimizer.param_groups for p in group['params']}
    if model is None or not isinstance(optimizer, torch.optim.SGD):
        return set()
    return {id(p) for m in model.modules()
            if isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag)) and m.sparse
            for p in m.parameters()}


def _zero_step(optimizer, sparse):
    """Create a fresh optimizer's state with one step on zero gradients, leaving the parameters
    as they were. Parameters that require a gradient keep the zero one, as Horovod leaves them
    (the others keep None); those in ``sparse`` (ids) get a sparse one."""
    saved = []
    for group in optimizer.param_groups:
        for p in group['params']:
            if p.requires_grad:
                saved.append((p, p.detach().clone()))
                if p.grad is None or p.grad.is_sparse != (id(p) in sparse):
                    p.grad = torch.zeros_like(p).to_sparse() if id(p) in sparse else torch.zeros_like(p)
                else:
                    p.grad.zero_()
    if getattr(optimizer, '_ringrun_distributed', False):
        # A DistributedOptimizer's own step() would allreduce: take the wrapped class's step.
        super(optimizer.__class__, optimizer).step()
    else:
        optimizer.step()
    with torch.no_grad():
        for p, value in saved:
            p.copy_(value)  # the zero step may still move parameters (weight decay)


def broadcast_optimizer_state(optimizer, root_rank, model=None):
    """Overwrite every rank's optimizer state (per-parameter state such as Adam's moments and
    step, and the param_groups' options such as lr) with root_rank's.

    An optimizer without state yet (no step taken) gets it first from one step on zero
    gradients that leaves the parameters unchanged, so a fresh optimizer can receive the state
    of one loaded from a checkpoint. Parameter groups must match across ranks. ``model``
    (optional, as in Horovod) names the sparse parameters: under SGD, those of its sparse
    Embedding modules take that step with sparse gradients, as in training (SparseAdam's always
    do). Sparse state tensors (SGD's momentum of a sparse embedding) travel pickled.
    """
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError('cannot broadcast torch.optim.LBFGS state; broadcast its state_dict() '
                         'with broadcast_object and load_state_dict instead.')
    if len(optimizer.state) == 0:
        _zero_step(optimizer, _sparse_parameters(optimizer, model))

    # Options (lr, betas, ...), non-tensor state and sparse state tensors travel pickled in one
    # object, first, with the root's layout: the dense state tensors it names are then broadcast in
    # place, named by their group, position and key (a fresh rank's zero step may have made a
    # sparse one dense).
    options = [{k: v for k, v in group.items() if k != 'params'} for group in optimizer.param_groups]
    counts = [len(group['params']) for group in optimizer.param_groups]
    scalars = {}
    dense = []
    for gi, group in enumerate(optimizer.param_groups):
        for pi, p in enumerate(group['params']):
            for key, value in sorted(optimizer.state.get(p, {}).items(), key=lambda kv: str(kv[0])):
                if not torch.is_tensor(value) or value.is_sparse:
                    scalars[(gi, pi, key)] = value
                else:
                    dense.append((gi, pi, key))
    options, counts, scalars, dense = broadcast_object((options, counts, scalars, dense), root_rank,
                                                       name='broadcast_optimizer_state.options')
    # Every rank learns every rank's verdict, so all raise together: a rank that raised alone
    # would leave the others waiting in broadcasts it never joins.
    verdicts = allgather_object(_layout_mismatch(optimizer, counts, dense, root_rank),
                                name='broadcast_optimizer_state.layout')
    for verdict in verdicts:
        if verdict is not None:
            raise ValueError('broadcast_optimizer_state: %s; build the optimizer the same way on every rank.'
                             % verdict)
    handles = []
    for gi, pi, key in dense:
        p = optimizer.param_groups[gi]['params'][pi]
        value = optimizer.state[p][key]
        if value.is_sparse:  # the root's is dense
            value = optimizer.state[p][key] = value.to_dense()
        handles.append(broadcast_async_(value, root_rank, name='broadcast_optimizer_state.%d.%d.%s' % (gi, pi, key)))
    for handle in handles:
        synchronize(handle)

    for group, received in zip(optimizer.param_groups, options):
        group.update(received)
    for (gi, pi, key), value in scalars.items():
        p = optimizer.param_groups[gi]['params'][pi]
        optimizer.state[p][key] = value


def _layout_mismatch(optimizer, counts, dense, root_rank):
    """How this rank's optimizer differs from the root's layout (parameters per group, the state
    tensors it broadcasts), in words; None where it matches."""
    mine = [len(group['params']) for group in optimizer.param_groups]
    if mine != counts:
        return ('rank %d has %d param groups of %s parameters, rank %d has %d of %s'
                % (rank(), len(mine), mine, root_rank, len(counts), counts))
    for gi, pi, key in dense:
        value = optimizer.state.get(optimizer.param_groups[gi]['params'][pi], {}).get(key)
        if not torch.is_tensor(value):
            return ('rank %d has no %r state tensor for parameter %d of param group %d, which rank %d has'
                    % (rank(), key, pi, gi, root_rank))
    return None
