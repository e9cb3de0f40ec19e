"""ringrun.tensorflow.keras: horovod.tensorflow.keras for Keras 3 on the TensorFlow backend.

    import keras
    import ringrun.tensorflow.keras as hvd     # or: import ringrun.keras as hvd

    hvd.init()
    model = ...
    opt = hvd.DistributedOptimizer(keras.optimizers.Adam(0.001 * hvd.size()))
    model.compile(optimizer=opt, loss='sparse_categorical_crossentropy')
    model.fit(x, y, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                               hvd.callbacks.MetricAverageCallback()],
              verbose=1 if hvd.rank() == 0 else 0)

Run it under ``ringrun -np 4 python3 train.py``. Keras must use the TensorFlow backend
(``KERAS_BACKEND=tensorflow``, its default).
"""

import keras

__all__ = ['Average', 'Compression', 'DistributedOptimizer', 'PartialDistributedOptimizer', 'ProcessSet', 'Sum',
           'add_process_set', 'allgather', 'allreduce', 'broadcast', 'broadcast_global_variables', 'callbacks',
           'ccl_built', 'cross_rank', 'cross_size', 'cuda_built', 'ddl_built', 'elastic', 'global_process_set',
           'gloo_built', 'gloo_enabled', 'init', 'is_initialized', 'load_model', 'local_rank', 'local_size',
           'mpi_built', 'mpi_enabled', 'mpi_threads_supported', 'nccl_built', 'rank', 'reducescatter',
           'remove_process_set', 'rocm_built', 'shutdown', 'size', 'start_timeline', 'stop_timeline']

if keras.backend.backend() != 'tensorflow':
    raise ImportError(f"ringrun.tensorflow.keras needs Keras on the TensorFlow backend, not "
                      f"'{keras.backend.backend()}'; set KERAS_BACKEND=tensorflow (or use ringrun.torch with torch)")

import tensorflow as tf  # noqa: E402

from ringrun.tensorflow.collectives import allreduce as _allreduce  # noqa: E402
from ringrun.tensorflow.collectives import reducescatter as _reducescatter  # noqa: E402
from ringrun.tensorflow.compression import Compression  # noqa: E402,F401
from ringrun.tensorflow.functions import broadcast_global_variables  # noqa: E402,F401
from ringrun.tensorflow.keras import callbacks, elastic  # noqa: E402,F401
from ringrun.tensorflow.keras.optimizer import DistributedOptimizer, PartialDistributedOptimizer  # noqa: E402,F401
from ringrun.tensorflow.keras.optimizer import _DistributedOptimizer as _DistributedOptimizerMixin  # noqa: E402
from ringrun.tensorflow.mpi_ops import (  # noqa: E402,F401
    Average, ProcessSet, Sum, add_process_set, ccl_built, cross_rank, cross_size, cuda_built, ddl_built,
    global_process_set, gloo_built, gloo_enabled, init, is_initialized, local_rank, local_size, mpi_built,
    mpi_enabled, mpi_threads_supported, nccl_built, rank, remove_process_set, rocm_built, shutdown, size,
    start_timeline, stop_timeline)
from ringrun.tensorflow.mpi_ops import allgather as _allgather  # noqa: E402
from ringrun.tensorflow.mpi_ops import broadcast as _broadcast  # noqa: E402


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0, op=None,
              compression=Compression.none):
    """The allreduce (Average unless ``op``) of a tensor-compatible value over every rank."""
    return _allreduce(tf.constant(value, name=name), average=average, prescale_factor=prescale_factor,
                      postscale_factor=postscale_factor, op=op, compression=compression)


def allgather(value, name=None):
    """Every rank's value (tensor-compatible) concatenated on the first dimension, in rank order."""
    return _allgather(tf.constant(value, name=name))


def broadcast(value, root_rank, name=None):
    """``root_rank``'s value (tensor-compatible) on every rank."""
    return _broadcast(tf.constant(value, name=name), root_rank)


def reducescatter(value, name=None, op=Average):
    """This rank's share of the reduction of a tensor-compatible value over every rank."""
    return _reducescatter(tf.constant(value, name=name), op=op)


def _all_subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _all_subclasses(sub)


def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=Compression.none, legacy_opts=False):
    """keras.models.load_model whose optimizer comes back wrapped in DistributedOptimizer, with its
    saved state (Keras' own optimizers are known; pass others in ``custom_optimizers``)."""
    if legacy_opts:
        raise ValueError("load_model: Keras 3 has no legacy optimizers; leave legacy_opts=False")

    def wrapped(cls):
        def from_config(_, config, custom_objects=None):
            return DistributedOptimizer(cls.from_config(config), compression=compression)
        return type(cls.__name__, (cls,), {'from_config': classmethod(from_config), '__module__': cls.__module__,
                                           '_ringrun_loader': True})

    # Keras' optimizer classes: not the subclasses ringrun made (distributed ones, earlier loaders).
    classes = [c for c in _all_subclasses(keras.optimizers.Optimizer)
               if not c.__name__.startswith('_') and not issubclass(c, _DistributedOptimizerMixin)
               and '_ringrun_loader' not in c.__dict__]
    objects = {}
    for cls in classes + list(custom_optimizers or []):
        objects[cls.__name__] = objects[cls.__name__.lower()] = wrapped(cls)
    objects.update(custom_objects or {})
    return keras.models.load_model(filepath, custom_objects=objects)
