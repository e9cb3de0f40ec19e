"""horovod.tensorflow.DistributedOptimizer: Keras 3 optimizers (through ringrun.tensorflow.keras)
and TensorFlow 1's tf.compat.v1.train.Optimizer (gradients averaged in compute_gradients)."""

import tensorflow as tf

from ringrun.tensorflow.adasum_optimizer import _DistributedAdasumOptimizer
from ringrun.tensorflow.compression import Compression
from ringrun.tensorflow.gradients import _check_options, _make_allreduce_grads_fn, _reduce_except_local
from ringrun.tensorflow.keras.optimizer import DistributedOptimizer as _keras_distributed_optimizer
from ringrun.tensorflow.mpi_ops import Adasum, Average, global_process_set
from ringrun.tensorflow.util import _ref


class _DistributedLegacyOptimizer(tf.compat.v1.train.Optimizer):
    """Wraps a tf.compat.v1.train.Optimizer: compute_gradients() returns the gradients averaged
    over the ranks; everything else is the wrapped optimizer's."""

    def __init__(self, optimizer, name, use_locking, allreduce_grads, scale_local_gradients, process_set):
        super().__init__(name=name or f"Distributed{type(optimizer).__name__}", use_locking=use_locking)
        self._optimizer = optimizer
        self._allreduce_grads = allreduce_grads
        self._local_vars = set()
        self.scale_local_gradients = scale_local_gradients
        self.process_set = process_set

    def register_local_var(self, var):
        """Keeps the gradient of ``var`` local (only divided by the process set's size when
        scale_local_gradients)."""
        self._local_vars.add(_ref(var))

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's (gradient, variable) pairs, the gradients averaged over the ranks."""
        grads, variables = zip(*self._optimizer.compute_gradients(*args, **kwargs))
        reduced = _reduce_except_local(self._allreduce_grads, list(grads), list(variables), self._local_vars,
                                       self.scale_local_gradients, self.process_set)
        return list(zip(reduced, variables))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        return self._optimizer.apply_gradients(grads_and_vars, global_step=global_step, name=name)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense='', device_sparse='',
                         compression=Compression.none, sparse_as_dense=False, backward_passes_per_step=1, op=Average,
                         gradient_predivide_factor=1.0, average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """An optimizer that averages the gradients over the ranks before applying them.

    A Keras 3 optimizer is wrapped as ``ringrun.tensorflow.keras.DistributedOptimizer`` does (the
    gradients are reduced in ``apply()``, which ``model.fit`` and ``apply_gradients`` call); a
    ``tf.compat.v1.train.Optimizer`` averages them in ``compute_gradients()``. The options are
    Horovod's: ``op`` (Average or Sum), ``compression``, ``sparse_as_dense``,
    ``gradient_predivide_factor``, ``groups``, ``backward_passes_per_step`` with
    ``average_aggregated_gradients`` (Keras optimizers), ``register_local_var()`` for variables
    whose gradients stay local, ``process_set`` (the ranks that average).

    ``op=Adasum`` with a ``tf.compat.v1.train.Optimizer`` returns Horovod's delta optimizer
    (adasum_optimizer.py: each rank steps locally and the variables' changes are combined by
    Adasum every ``backward_passes_per_step`` steps); with a Keras optimizer it raises ValueError,
    as horovod.tensorflow's does (``ringrun.tensorflow.keras.DistributedOptimizer`` takes it, as
    horovod.keras does, and combines the gradients by Adasum).
    """
    if op == Adasum and not isinstance(optimizer, tf.compat.v1.train.Optimizer):
        raise ValueError("DistributedOptimizer: op=Adasum with a Keras optimizer is refused here, as by "
                         "horovod.tensorflow; ringrun.tensorflow.keras.DistributedOptimizer(opt, op=Adasum) "
                         "combines its gradients by Adasum (as horovod.keras does)")
    if op == Adasum and average_aggregated_gradients:
        raise ValueError("DistributedOptimizer: op=Adasum combines updates, not averaged gradients; leave "
                         "average_aggregated_gradients=False")
    groups = _check_options(op, gradient_predivide_factor, num_groups, groups)
    if isinstance(optimizer, tf.compat.v1.train.Optimizer) and op == Adasum:
        return _DistributedAdasumOptimizer(optimizer, name, use_locking, device_dense, device_sparse, compression,
                                           backward_passes_per_step, process_set)
    if isinstance(optimizer, tf.compat.v1.train.Optimizer):
        if backward_passes_per_step != 1:
            raise NotImplementedError("DistributedOptimizer: backward_passes_per_step > 1 needs a Keras optimizer "
                                      "(tf.keras.optimizers.*), not a tf.compat.v1.train.Optimizer")
        allreduce_grads = _make_allreduce_grads_fn(name or 'DistributedOptimizer', device_dense, device_sparse,
                                                   compression, sparse_as_dense, op, gradient_predivide_factor,
                                                   groups, process_set)
        return _DistributedLegacyOptimizer(optimizer, name, use_locking, allreduce_grads, scale_local_gradients,
                                           process_set)
    return _keras_distributed_optimizer(
        optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse, compression=compression,
        sparse_as_dense=sparse_as_dense, gradient_predivide_factor=gradient_predivide_factor, op=op,
        backward_passes_per_step=backward_passes_per_step, average_aggregated_gradients=average_aggregated_gradients,
        groups=groups, process_set=process_set, scale_local_gradients=scale_local_gradients)
