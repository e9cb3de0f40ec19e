"""ringrun.tensorflow: Horovod's TensorFlow API on ringrun's runtime (TensorFlow 2, Keras 3).

A Horovod script migrates by changing its import::

    import ringrun.tensorflow as hvd

    hvd.init()
    model = ...
    optimizer = keras.optimizers.SGD(0.01 * hvd.size())

    @tf.function
    def step(x, y, first):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        if first:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(optimizer.variables, root_rank=0)
        return loss

and runs under ``ringrun -np 4 python3 train.py``. The collectives are TensorFlow ops (eager, in
tf.function and in TensorFlow 1 graphs) whose async kernels hand TensorFlow's buffers to ringrun's
engine, which fuses the ops every rank submits. Keras: ``ringrun.tensorflow.keras`` (or
``ringrun.keras``). Elastic training: ``ringrun.tensorflow.elastic``. ``man ringrun-tensorflow``
has the whole API; the README's "Coming from Horovod: TensorFlow and Keras" what differs.
"""

from ringrun.tensorflow.mpi_ops import *  # noqa: F401,F403  (the ops and queries: mpi_ops.__all__)
from ringrun.tensorflow.mpi_ops import _allreduce, _grouped_allreduce, _grouped_reducescatter, _reducescatter  # noqa: F401
from ringrun.tensorflow.collectives import (  # noqa: F401
    allreduce, grouped_allreduce, grouped_reducescatter, reducescatter)
from ringrun.tensorflow.compression import Compression  # noqa: F401
from ringrun.tensorflow.functions import (  # noqa: F401
    allgather_object, broadcast_global_variables, broadcast_object, broadcast_object_fn, broadcast_variables)
from ringrun.tensorflow.gradients import (  # noqa: F401
    DistributedGradientTape, PartialDistributedGradientTape, _make_allreduce_grads_fn)
from ringrun.tensorflow.optimizer import DistributedOptimizer  # noqa: F401
from ringrun.tensorflow.sync_batch_norm import SyncBatchNormalization  # noqa: F401
from ringrun.tensorflow.util import _executing_eagerly, _make_subgraph  # noqa: F401
from ringrun.tensorflow import elastic, util  # noqa: F401
from ringrun.tensorflow_build import status as _build_status  # noqa: F401
