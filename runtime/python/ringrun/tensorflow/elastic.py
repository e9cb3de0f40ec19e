"""ringrun.tensorflow.elastic: Horovod's elastic training for TensorFlow on ringrun's runtime.

Start the job in elastic mode (``ringrun -np 4 --min-np 2 python3 train.py``) and write the
training as in Horovod::

    import ringrun.tensorflow as hvd

    hvd.init()
    state = hvd.elastic.TensorFlowKerasState(model, optimizer, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        ...  # from state.epoch / state.batch; state.commit() every few batches

    train(state)

A failed collective (a dead peer) raises a TensorFlow error from a ringrun op; ``run`` takes it as
``InternalError``, restores the last commit, joins the next world (same process, maybe another rank
and size), broadcasts rank 0's state and calls the function again (``ringrun.common.elastic``; man
ringrun-tensorflow). Graphs built before a reset keep working: the collectives and ``size_op()``
read the world when they run, and the gradient averaging reads size() as an op in elastic mode.
"""

import functools

import numpy as np
import tensorflow as tf

from ringrun.common.elastic import ObjectState, State, run_fn  # noqa: F401 - horovod.tensorflow.elastic's names
from ringrun.tensorflow.functions import broadcast_object, broadcast_variables
from ringrun.tensorflow.mpi_ops import HostsUpdatedInterrupt, InternalError, rank  # noqa: F401

__all__ = ['run', 'State', 'ObjectState', 'TensorFlowKerasState', 'TensorFlowState', 'HostsUpdatedInterrupt']


def _failures_as_internal_error(func):
    """func, with TensorFlow's errors from ringrun's ops raised as InternalError."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except tf.errors.OpError as e:
            if 'Ringrun' not in str(e):
                raise
            raise InternalError(str(e).strip().splitlines()[0]) from e

    return wrapper


def run(func):
    """Decorates ``func(state, *args, **kwargs)``, the training, to survive changes of the world.

    The wrapper syncs ``state`` from rank 0, then calls ``func``. When a collective fails (a peer
    died: an error from a ringrun op, or InternalError) the state goes back to its last commit;
    when ``state.commit()`` raises ``HostsUpdatedInterrupt`` it stays. Either way the process joins
    the next world, the reset callbacks run, the state is synced again (unless only processes left)
    and ``func`` is called again. A process that is not in the next world raises SystemExit(0).
    """
    return run_fn(_failures_as_internal_error(func))


@_failures_as_internal_error
def _broadcast(variables):
    broadcast_variables(variables, root_rank=0)


def _values(variables):
    return [np.array(v.numpy()) for v in variables]


def _assign(variables, values):
    for var, value in zip(variables, values):
        var.assign(value)


class TensorFlowKerasState(ObjectState):
    """The state of a Keras model and its optimizer (``model.optimizer`` unless given), with
    picklable attributes as keyword arguments::

        state = hvd.elastic.TensorFlowKerasState(model, optimizer, epoch=0, batch=0)

    ``commit()`` copies the model's and the optimizer's variables to host memory, ``restore()``
    assigns them back, ``sync()`` broadcasts rank 0's. The model must be built.
    """

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        if not getattr(model, 'built', True):
            raise ValueError('TensorFlowKerasState: build the model first (model.build(input_shape) or one call)')
        self.model = model
        self.optimizer = optimizer if optimizer is not None else model.optimizer
        self.backend = backend
        self._save_model()
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **kwargs)

    def _variables(self):
        optimizer_variables = self.optimizer.variables if self.optimizer is not None else []
        return list(self.model.variables), list(optimizer_variables() if callable(optimizer_variables) else
                                               optimizer_variables)

    def _save_model(self):
        model_variables, optimizer_variables = self._variables()
        self._saved_model_state = _values(model_variables)
        self._saved_optimizer_state = _values(optimizer_variables)

    def save(self):
        self._save_model()
        super().save()

    def restore(self):
        model_variables, optimizer_variables = self._variables()
        _assign(model_variables, self._saved_model_state)
        _assign(optimizer_variables, self._saved_optimizer_state)
        super().restore()

    def sync(self):
        model_variables, optimizer_variables = self._variables()
        _broadcast(model_variables + optimizer_variables)
        self._save_model()
        super().sync()


class TensorFlowState(ObjectState):
    """The state of a list of tf.Variables (eagerly), with picklable attributes as keyword
    arguments: ``TensorFlowState(model.variables, epoch=0)``."""

    def __init__(self, variables=None, session=None, **kwargs):
        if variables is None:
            raise ValueError('TensorFlowState: pass the variables to keep (there are no global variables eagerly)')
        self.variables = list(variables)
        self._values = _values(self.variables)
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **kwargs)

    def save(self):
        self._values = _values(self.variables)
        super().save()

    def restore(self):
        _assign(self.variables, self._values)
        super().restore()

    def sync(self):
        _broadcast(self.variables)
        self._values = _values(self.variables)
        super().sync()
