"""Elastic training state: what ringrun.torch.elastic.run commits, restores and broadcasts.

``State`` is the protocol and ``ObjectState`` keeps picklable attributes (both in
``ringrun.common.elastic``, which says what commit, restore and sync do); ``TorchState`` adds
models, optimizers, LR schedulers and ElasticSamplers, each through a handler.
"""

import copy

import torch

from ringrun.common.elastic import ObjectState, State  # noqa: F401 - this module's names
from ringrun.torch.basics import rank
from ringrun.torch.elastic.sampler import ElasticSampler
from ringrun.torch.functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters

__all__ = ['State', 'ObjectState', 'TorchState']


class TorchState(ObjectState):
    """The state of a PyTorch training process::

        state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)

    Models (``torch.nn.Module``), optimizers, LR schedulers and ``ElasticSampler``s, as any keyword
    argument, are saved as deep copies of their state_dict() and synced by broadcasts from rank 0;
    other values are picklable objects (ObjectState). Each becomes an attribute
    (``state.model``, ``state.epoch``); assigning a new model or optimizer also saves it.
    """

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(dict(model=model, optimizer=optimizer))
        self._handlers, kwargs = _get_handlers(kwargs)
        for name, handler in self._handlers.items():
            setattr(self, name, handler.value)
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **kwargs)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self):
        # Each handler also saves what it received: restore() after a sync goes back to the
        # synced state, not to this process's own older one (a newcomer's random weights).
        for handler in self._handlers.values():
            handler.sync()
            handler.save()
        super().sync()

    def reset(self):
        for handler in self._handlers.values():
            handler.reset()
        super().reset()

    def __setattr__(self, name, value):
        if hasattr(self, name) and name in self._handlers:
            self._handlers[name].set_value(value)
        super().__setattr__(name, value)


class StateHandler:
    """Saves, restores and syncs one object of a TorchState."""

    def __init__(self, value):
        self.value = value

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def reset(self):
        pass

    def set_value(self, value):
        self.value = value
        self.save()


class _StateDictHandler(StateHandler):
    def __init__(self, value):
        super().__init__(value)
        self._saved = copy.deepcopy(value.state_dict())

    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)


class ModelStateHandler(_StateDictHandler):
    def sync(self):
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class OptimizerStateHandler(_StateDictHandler):
    def sync(self):
        broadcast_optimizer_state(self.value, root_rank=0)


class LRSchedulerStateHandler(_StateDictHandler):
    def sync(self):
        self.value.load_state_dict(broadcast_object(self.value.state_dict(), name='ringrun.elastic.lr_scheduler'))


class SamplerStateHandler(_StateDictHandler):
    def sync(self):
        self.value.load_state_dict(broadcast_object(self.value.state_dict(), name='ringrun.elastic.sampler'))

    def reset(self):
        self.value.reset()  # the new rank and size, also when the sync is skipped


# torch >= 2.0 schedulers derive from LRScheduler (StepLR is no longer an _LRScheduler) and
# ReduceLROnPlateau derived from neither before 2.2; all of them have state_dict().
_SCHEDULER_TYPES = tuple({getattr(torch.optim.lr_scheduler, name) for name in
                          ('LRScheduler', '_LRScheduler', 'ReduceLROnPlateau')
                          if hasattr(torch.optim.lr_scheduler, name)})

_handler_registry = [
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (_SCHEDULER_TYPES, LRSchedulerStateHandler),
    (ElasticSampler, SamplerStateHandler),
]


def get_handler_registry():
    """The (type, handler class) pairs TorchState tries in order."""
    return _handler_registry


def set_handler_registry(registry):
    """Replaces the (type, handler class) pairs, e.g. to add a handler for another type."""
    global _handler_registry
    _handler_registry = registry


def _get_handlers(kwargs):
    handlers, remainder = {}, {}
    for key, value in kwargs.items():
        handler_cls = next((cls for kind, cls in _handler_registry if isinstance(value, kind)), None)
        if handler_cls is not None:
            handlers[key] = handler_cls(value)
        else:
            remainder[key] = value
    return handlers, remainder
