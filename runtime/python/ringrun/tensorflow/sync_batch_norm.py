"""SyncBatchNormalization: Keras 3 batch normalization whose batch statistics cover every rank's
batch (horovod.tensorflow.SyncBatchNormalization)."""

import keras
import tensorflow as tf

from ringrun.tensorflow.collectives import grouped_allreduce
from ringrun.tensorflow.mpi_ops import Sum, size


class SyncBatchNormalization(keras.layers.BatchNormalization):
    """BatchNormalization whose training-time mean and variance are those of the global batch:
    every rank's sums and sums of squares are allreduced (a differentiable allreduce, so the
    gradients are the global batch's too). Inference and masked inputs are BatchNormalization's."""

    def _moments(self, inputs, mask):
        if mask is not None or size() == 1:
            return super()._moments(inputs, mask)
        axes = list(self._reduction_axes)
        count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(inputs), axes)), inputs.dtype)
        total, squares, count = grouped_allreduce(
            [tf.reduce_sum(inputs, axes), tf.reduce_sum(tf.square(inputs), axes), tf.reshape(count, [1])], op=Sum)
        mean = total / count
        return mean, tf.maximum(squares / count - tf.square(mean), 0.0)
