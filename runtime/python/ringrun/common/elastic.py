"""Elastic training without a framework: the State protocol, ObjectState, and the retry loop that
``ringrun.torch.elastic.run`` and ``ringrun.tensorflow.elastic.run`` wrap around the training.

As in Horovod:

- ``commit()`` saves the state in host memory, then checks whether the world changes (a process
  added, lost or leaving) and raises ``HostsUpdatedInterrupt`` on every rank if so;
- ``restore()`` goes back to the last commit (after a failed collective);
- ``sync()`` broadcasts rank 0's state to every rank (at the start and after each reset); what it
  received is the new restore point.

Differences from Horovod: the ranks agree on host updates with a MAX allreduce
(``ringrun.elastic.check``), not a broadcast from rank 0.
"""

import array
import functools
import signal
import threading

from ringrun import _ringrun
from ringrun.common.basics import HostsUpdatedInterrupt, InternalError

__all__ = ['State', 'ObjectState', 'run_fn']

# Set by the SIGTERM handler of run_fn: this process leaves at its next commit.
_leave_requested = threading.Event()

CHECK_NAME = 'ringrun.elastic.check'

# Tries of ringrun_reset() when a member is lost while the next world forms.
_RESET_TRIES = 4


def _agree_max(values):
    """The elementwise MAX of a few int64 over every rank (a named engine op, as every binding's)."""
    # A stdlib buffer: ringrun.torch must not need numpy, which torch's wheel does not bring.
    agreed = array.array('q', values)
    address, count = agreed.buffer_info()
    _ringrun.wait(_ringrun.allreduce_async(CHECK_NAME, address, address, count, _ringrun.INT64, _ringrun.MAX))
    return [int(v) for v in agreed]


class _HostMessages:
    """Horovod's queue of host updates, as far as a reader asks it: ``empty()`` is False once the
    launcher has published a world newer than this process's (not collective)."""

    def empty(self):
        if not _ringrun.elastic_enabled():
            return True
        latest, _ = _ringrun.elastic_status()
        return latest <= _ringrun.epoch()


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
        # Horovod's private names, which its own elastic test scripts read: whether a host update
        # waits (``_host_messages.empty()``), and the time of the last one (unused here).
        self._host_messages = _HostMessages()
        self._last_updated_timestamp = 0

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
        latest, added, leave = _agree_max([latest, int(added), int(leaving)])
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


def run_fn(func, before_reset=(), failures=(InternalError,)):
    """The elastic retry loop around ``func(state, *args, **kwargs)`` (a binding's ``run``).

    The wrapper syncs ``state`` from rank 0, then calls ``func``. When ``func`` raises one of
    ``failures`` (a peer died), the state goes back to its last commit; when it raises
    ``HostsUpdatedInterrupt`` (from ``state.commit()``), the state stays. Either way the process
    calls ``before_reset`` (what the binding drops), joins the next world, ``state.on_reset()``
    runs the reset callbacks, the state is synced again (unless only processes left) and ``func``
    is called again. A process that is not in the next world raises ``SystemExit(0)``.
    """

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        if not _ringrun.elastic_enabled():
            state.sync()
            return func(state, *args, **kwargs)
        previous = _catch_sigterm()
        skip_sync = False
        try:
            while True:
                try:
                    if not skip_sync:
                        state.sync()
                    return func(state, *args, **kwargs)
                except failures:
                    state.restore()
                    skip_sync = False
                except HostsUpdatedInterrupt as e:
                    skip_sync = e.skip_sync
                for forget in before_reset:
                    forget()
                _reset()
                state.on_reset()
        except Exception:
            # This process fails: said before its sockets close, so that the peers' reset forms
            # the world without it at once (one reset per failure, as a SIGKILL costs).
            _post_failure()
            raise
        finally:
            _restore_sigterm(previous)

    return wrapper


def _reset():
    """Leaves this world and joins the next. SystemExit(0) when this process is not in it."""
    for attempt in range(_RESET_TRIES):
        try:
            _ringrun.reset()
            return
        except InternalError as e:
            code = getattr(e, 'code', None)
            if code == _ringrun.ERR_REMOVED:
                raise SystemExit(0) from None
            if code != _ringrun.ERR_RESET or attempt == _RESET_TRIES - 1:
                raise


def _post_failure():
    try:
        _ringrun.elastic_fail()
    except InternalError:  # the launcher is gone or the job ended: nobody to tell
        pass


def _on_sigterm(signum, frame):
    _leave_requested.set()


def _catch_sigterm():
    """SIGTERM means "leave at the next commit" while run() runs (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _on_sigterm)


def _restore_sigterm(previous):
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)
