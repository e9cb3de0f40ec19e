"""Elastic training state: what ringrun.torch.elastic.run commits, restores and broadcasts.

``State`` is the protocol, ``ObjectState`` keeps picklable attributes, ``TorchState`` adds models,
optimizers, LR schedulers and ElasticSamplers (each through a handler). As in Horovod:

- ``commit()`` saves the state in host memory, then checks whether the world changes (a process
  added, lost or leaving) and raises ``HostsUpdatedInterrupt`` on every rank if so;
- ``restore()`` goes back to the last commit (after a failed collective);
- ``sync()`` broadcasts rank 0's state to every rank (at the start and after each reset); what it
  received is the new restore point.
"""

import copy
import threading

import torch

from ringrun import _ringrun
from ringrun.torch.basics import HostsUpdatedInterrupt, Max, rank
from ringrun.torch.elastic.sampler import ElasticSampler
from ringrun.torch.functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters
from ringrun.torch.reduce_ops import allreduce_

__all__ = ['State', 'ObjectState', 'TorchState']

# Set by the SIGTERM handler of ringrun.torch.elastic.run: this process leaves at its next commit.
_leave_requested = threading.Event()

CHECK_NAME = 'ringrun.elastic.check'


class State:
    """Tracks state that every rank keeps alike, and the reset callbacks.

    Args:
        bcast_object: a function that returns rank 0's copy of an object on every rank.
        get_rank: a function that returns this process's rank.
    """

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Adds functions called (without arguments) after each reset, once the new world is
        formed, before the state is synced: e.g. to scale the learning rate with size()."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Saves the state (``save()``), then checks for a change of the world
        (``check_host_updates()``). A commit copies the state: commit every few batches, trading
        its cost against the batches redone after a failure."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises ``HostsUpdatedInterrupt`` on every rank when the launcher has published a newer
        world or any rank asked to leave (SIGTERM). Collective: every rank must call it (commit()
        does). The ranks agree with a MAX allreduce, so all raise at the same commit."""
        if not _ringrun.elastic_enabled():
            return
        latest, added = _ringrun.elastic_status()
        leaving = _leave_requested.is_set()
        if leaving:
            _ringrun.elastic_leave()  # posted before the agreement: the launcher then sees a leave
        epoch = _ringrun.epoch()
        agreed = torch.tensor([latest, int(added), int(leaving)], dtype=torch.int64)
        allreduce_(agreed, name=CHECK_NAME, op=Max)
        latest, added, leave = (int(v) for v in agreed.tolist())
        if latest > epoch or leave:
            # Only losing processes (or one leaving): the committed state is equal on every rank,
            # no broadcast needed. Several newer worlds: one of them may have added a process.
            raise HostsUpdatedInterrupt(skip_sync=not added and latest <= epoch + 1)

    def save(self):
        """Saves the state in host memory."""
        raise NotImplementedError()

    def restore(self):
        """Goes back to the last saved state, undoing what was not committed."""
        raise NotImplementedError()

    def sync(self):
        """Makes every rank's state rank 0's. Collective."""
        raise NotImplementedError()

    def reset(self):
        """Adapts the state to the new world after a reset, before it is synced."""


class ObjectState(State):
    """State of picklable Python objects, given as keyword arguments and kept as attributes.

    Args:
        bcast_object: a function that returns rank 0's copy of an object on every rank.
        get_rank: a function that returns this process's rank.
        kwargs: the attributes, with their initial values.
    """

    def __init__(self, bcast_object, get_rank, **kwargs):
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        self._saved_state = {attr: getattr(self, attr) for attr in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            setattr(self, attr, value)


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


_handler_registry = [
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (torch.optim.lr_scheduler._LRScheduler, LRSchedulerStateHandler),
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
