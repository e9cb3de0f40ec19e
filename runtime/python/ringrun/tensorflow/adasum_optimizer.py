"""DistributedOptimizer(op=hvd.Adasum) for a tf.compat.v1.train.Optimizer: Horovod's delta optimizer.

Adasum combines the ranks' *updates*, not their gradients: each rank applies its own gradients
with the wrapped optimizer, and every ``backward_passes_per_step``-th step the change the local
steps made to each variable since the last combination (its delta) is allreduced with op=Adasum
and every rank sets the variable to its value at the start plus the combined delta. The wrapped
optimizer's state (momentum, Adam's moments) stays each rank's own. As in Horovod, Keras
optimizers do not take op=Adasum (ringrun.tensorflow.keras raises ValueError); the tape
(DistributedGradientTape(op=Adasum)) combines gradients instead.
"""

import tensorflow as tf

from ringrun.tensorflow.collectives import allreduce
from ringrun.tensorflow.mpi_ops import Adasum


class _DistributedAdasumOptimizer(tf.compat.v1.train.Optimizer):
    """Wraps a tf.compat.v1.train.Optimizer: apply_gradients() steps locally, then combines the
    deltas by Adasum on communication steps. compute_gradients() is the wrapped optimizer's (this
    rank's own gradients)."""

    def __init__(self, optimizer, name, use_locking, device_dense, device_sparse, compression,
                 backward_passes_per_step, process_set):
        if backward_passes_per_step < 1:
            raise ValueError(f"backward_passes_per_step must be at least 1, not {backward_passes_per_step}")
        super().__init__(name=name or f"DistributedDelta{type(optimizer).__name__}", use_locking=use_locking)
        self._optimizer = optimizer
        self._reduce_options = dict(device_dense=device_dense, device_sparse=device_sparse, compression=compression,
                                    process_set=process_set)
        self.process_set = process_set
        self._passes = backward_passes_per_step

    def compute_gradients(self, *args, **kwargs):
        """This rank's (gradient, variable) pairs (the wrapped optimizer's): Adasum combines updates."""
        return self._optimizer.compute_gradients(*args, **kwargs)

    def _combine(self, variables, starts):
        """Every variable set to its start plus the Adasum of the ranks' deltas since then."""
        updates = []
        for var, start in zip(variables, starts):
            delta = var.read_value() - start.read_value()
            combined = allreduce(delta, op=Adasum, **self._reduce_options)
            new_start = start.assign_add(combined, use_locking=self._use_locking)
            updates.append(var.assign(new_start, use_locking=self._use_locking))
        return tf.group(*updates)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Applies this rank's gradients with the wrapped optimizer, then (every
        backward_passes_per_step-th call) combines the variables' deltas over the ranks."""
        grads_and_vars = [(g, v) for g, v in grads_and_vars if g is not None]
        if not grads_and_vars:
            raise ValueError("apply_gradients: no gradients to apply (every gradient is None)")
        variables = [v for _, v in grads_and_vars]
        with tf.init_scope():  # the start values and the count: variables, created once
            starts = [self._zeros_slot(v, "delta_start", self._name) for v in variables]
            # Created once per graph, found again after (tf.compat.v1.train.Optimizer's bookkeeping).
            count = self._create_non_slot_variable(tf.constant(0, tf.int64), "adasum_step_count", variables[0])
        first = tf.equal(count, 0)
        remember = [tf.cond(first, lambda s=s, v=v: s.assign(v.read_value()).op, tf.no_op)
                    for s, v in zip(starts, variables)]
        with tf.control_dependencies(remember):
            local_step = self._optimizer.apply_gradients(grads_and_vars, global_step=global_step, name=name)
        with tf.control_dependencies([local_step]):
            communicate = tf.equal(count % self._passes, self._passes - 1)
            combined = tf.cond(communicate, lambda: self._combine(variables, starts), tf.no_op)
        with tf.control_dependencies([combined]):
            return count.assign_add(1, use_locking=self._use_locking).op

    def get_slot(self, var, name):
        """A slot of this optimizer ("delta_start") or of the wrapped one."""
        own = super().get_slot(var, name)
        return own if own is not None else self._optimizer.get_slot(var, name)

    def get_slot_names(self):
        """This optimizer's slot names and the wrapped one's."""
        return super().get_slot_names() + self._optimizer.get_slot_names()

    def variables(self):
        """The wrapped optimizer's variables and this one's (start values, step count)."""
        return self._optimizer.variables() + super().variables()
