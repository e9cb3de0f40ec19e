"""Elastic training with Keras 3 (horovod.tensorflow.keras.elastic's names): KerasState and the
callbacks that commit it and keep its batch and epoch.

    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    callbacks = [hvd.elastic.CommitStateCallback(state), hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.UpdateEpochStateCallback(state)]

    @hvd.elastic.run
    def train(state):
        model.fit(dataset, steps_per_epoch=..., epochs=epochs - state.epoch, callbacks=callbacks)
"""

import keras

from ringrun.tensorflow.elastic import TensorFlowKerasState, run

__all__ = ['KerasState', 'CommitStateCallback', 'UpdateBatchStateCallback', 'UpdateEpochStateCallback', 'run']


class KerasState(TensorFlowKerasState):
    """The state of a Keras model and its optimizer, with picklable attributes (``batch``,
    ``epoch``) as keyword arguments."""

    def __init__(self, model, optimizer=None, **kwargs):
        super().__init__(model, optimizer=optimizer, **kwargs)


class CommitStateCallback(keras.callbacks.Callback):
    """Commits ``state`` every ``batches_per_commit`` batches and at the end of each epoch."""

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit

    def on_train_begin(self, logs=None):
        self.batches_remaining = self.batches_per_commit  # alike on every rank after a reset

    def on_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        self.commit()

    def commit(self):
        """Commits ``state`` now (what the callback does at its batches and epochs' ends)."""
        self.state.commit()


class UpdateBatchStateCallback(keras.callbacks.Callback):
    """Keeps ``state.batch`` at the last finished batch (0 at each epoch's end); the first epoch
    after a reset is shortened by the batches already done when fit() was given steps_per_epoch."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.steps_per_epoch = None

    def on_train_begin(self, logs=None):
        self.steps_per_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        if self.params.get('steps'):
            if self.steps_per_epoch is None:
                self.steps_per_epoch = self.params.get('steps')
            self.params['steps'] = self.steps_per_epoch - self.state.batch

    def on_batch_end(self, batch, logs=None):
        self.state.batch = batch

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0


class UpdateEpochStateCallback(keras.callbacks.Callback):
    """Keeps ``state.epoch`` counting epochs across resets (fit's own count restarts at 0)."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.initial_epoch = self.state.epoch

    def on_train_begin(self, logs=None):
        self.initial_epoch = self.state.epoch

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch = self.initial_epoch + epoch + 1
