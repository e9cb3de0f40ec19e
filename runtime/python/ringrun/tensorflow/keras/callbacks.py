"""Keras 3 callbacks of horovod.tensorflow.keras.callbacks: the start broadcast, metric averaging
and learning-rate warmup and schedules."""

import keras
import numpy as np
import tensorflow as tf

from ringrun.tensorflow.collectives import grouped_allreduce
from ringrun.tensorflow.functions import broadcast_variables
from ringrun.tensorflow.mpi_ops import rank, size
from ringrun.tensorflow.util import _ref


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Makes every rank start from ``root_rank``'s model and optimizer state: broadcasts the
    model's variables (except ``local_variables``) and the optimizer's, once, when training starts
    (building the optimizer first if it has no variables yet; Horovod broadcasts after the first
    batch instead). Use it when every rank builds its model with its own random initialisation,
    or when only the root loaded a checkpoint."""

    def __init__(self, root_rank, device='', local_variables=None):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self.broadcast_done = False
        if local_variables is None:
            local_variables = []
        elif not isinstance(local_variables, (list, tuple)):
            local_variables = [local_variables]
        self._local_vars = {_ref(v) for v in local_variables}

    def register_local_var(self, var):
        """Keeps ``var`` out of the broadcast: each rank keeps its own value."""
        self._local_vars.add(_ref(var))

    def _broadcast(self):
        with tf.device(self.device):
            broadcast_variables([v for v in self.model.variables if _ref(v) not in self._local_vars],
                                root_rank=self.root_rank)
            optimizer = getattr(self.model, 'optimizer', None)
            if optimizer is not None:
                broadcast_variables(optimizer.variables, root_rank=self.root_rank)
        self.broadcast_done = True

    def on_train_begin(self, logs=None):
        optimizer = getattr(self.model, 'optimizer', None)
        if self.broadcast_done or not self.model.built:
            return
        if optimizer is not None and not optimizer.built:
            optimizer.build(self.model.trainable_variables)
        self._broadcast()

    def on_batch_end(self, batch, logs=None):
        if not self.broadcast_done:
            self._broadcast()


class MetricAverageCallback(keras.callbacks.Callback):
    """Averages the epoch's metrics (the ``logs``) over the ranks at the end of each epoch, so that
    callbacks after it (ReduceLROnPlateau, EarlyStopping, TensorBoard) see the same values on every
    rank. Put it before them in the list."""

    def __init__(self, device=''):
        super().__init__()
        self.device = device

    def _average_in_place(self, logs):
        names = [k for k, v in sorted((logs or {}).items()) if np.ndim(v) == 0 and np.isreal(v)]
        if not names:
            return
        with tf.device(self.device):
            values = [tf.constant(float(logs[k]), dtype=tf.float64) for k in names]
            averaged = grouped_allreduce(values, name='MetricAverageCallback')
        for k, v in zip(names, averaged):
            logs[k] = float(v.numpy())

    def on_epoch_end(self, epoch, logs=None):
        self._average_in_place(logs)


def _value(variable_or_value):
    return float(keras.ops.convert_to_numpy(variable_or_value))


def _is_variable(value):
    return isinstance(value, (tf.Variable, keras.Variable))


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Sets the learning rate to ``initial_lr * multiplier(epoch)`` from ``start_epoch`` up to
    ``end_epoch`` (exclusive). ``multiplier`` is a number (``multiplier ** (epoch - start_epoch)``)
    or a function of the epoch; with ``staircase=False`` it is called every batch with a fractional
    epoch (``epoch + batch / steps_per_epoch``). ``momentum_correction`` scales the momentum by
    new/old learning rate for that batch where the optimizer keeps its momentum in a variable
    (Keras 3's SGD keeps a number, which the traced step has already read: no correction there).
    """

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__()
        if initial_lr is None:
            raise ValueError('LearningRateScheduleCallback: initial_lr is required (e.g. 0.1 * hvd.size())')
        self.initial_lr = initial_lr
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = None
        self.restore_momentum = None
        self.multiplier = multiplier if callable(multiplier) else (lambda epoch: multiplier ** (epoch - start_epoch))

    def _autodetect_steps_per_epoch(self):
        if self.params.get('steps'):
            return self.params['steps']
        raise ValueError(f'{type(self).__name__}: cannot tell the steps per epoch; pass steps_per_epoch=')

    def _adjust_learning_rate(self, epoch):
        optimizer = self.model.optimizer
        old_lr = _value(optimizer.learning_rate)
        new_lr = self.initial_lr * self.multiplier(epoch)
        optimizer.learning_rate = new_lr
        momentum = getattr(optimizer, 'momentum', None)
        if self.momentum_correction and _is_variable(momentum) and old_lr > 0:
            self.restore_momentum = _value(momentum)
            momentum.assign(self.restore_momentum * new_lr / old_lr)

    def on_train_begin(self, logs=None):
        if not self.staircase and not self.steps_per_epoch:
            self.steps_per_epoch = self._autodetect_steps_per_epoch()

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_batch_begin(self, batch, logs=None):
        if self.current_epoch < self.start_epoch or (self.end_epoch is not None and self.current_epoch >= self.end_epoch):
            return
        if self.staircase and batch == 0:
            self._adjust_learning_rate(self.current_epoch)
        elif not self.staircase:
            self._adjust_learning_rate(self.current_epoch + float(batch) / self.steps_per_epoch)

    def on_batch_end(self, batch, logs=None):
        if self.restore_momentum is not None:
            self.model.optimizer.momentum.assign(self.restore_momentum)
            self.restore_momentum = None

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs['lr'] = _value(self.model.optimizer.learning_rate)


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Warms the learning rate up from ``initial_lr / size()`` to ``initial_lr`` over
    ``warmup_epochs``, batch by batch ("Accurate, Large Minibatch SGD", Goyal et al. 2017)."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True, steps_per_epoch=None, verbose=0):
        def multiplier(epoch):
            # Round numbers at the end of each epoch: the last batch of epoch e gives e + 1.
            epoch += 1.0 / self.steps_per_epoch
            return 1.0 / size() * (epoch * (size() - 1) / warmup_epochs + 1)

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs, staircase=False,
                         momentum_correction=momentum_correction, steps_per_epoch=steps_per_epoch)
        self.verbose = verbose

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0 and rank() == 0:
            print(f'\nEpoch {epoch + 1}: finished gradual learning rate warmup to '
                  f'{_value(self.model.optimizer.learning_rate):g}.')


class BestModelCheckpoint(keras.callbacks.ModelCheckpoint):
    """ModelCheckpoint that keeps only the best model (Horovod's; pass the filepath, which Keras 3
    requires)."""

    def __init__(self, filepath, monitor='val_loss', verbose=0, save_weights_only=False, mode='auto',
                 save_freq='epoch'):
        super().__init__(filepath=filepath, monitor=monitor, verbose=verbose, save_best_only=True,
                         save_weights_only=save_weights_only, mode=mode, save_freq=save_freq)
