"""DistributedOptimizer for Keras 3 (TensorFlow backend): any Keras optimizer whose apply()
averages the gradients over the ranks first.

Keras 3's optimizers take gradients in ``apply(grads, trainable_variables)`` (``apply_gradients``
and ``model.fit`` go through it), so that is where the wrapper reduces them; Keras then clips,
applies weight decay and updates as usual, on the averaged gradients. As in Horovod a step has two
phases: the gradients are reduced (with ``backward_passes_per_step=N``: summed locally, and reduced
on the N-th call), then applied (on the N-th call only; the calls in between only count
``iterations``). Horovod's Keras 2 ``compute_gradients()``/``_compute_gradients()`` run the first
phase and return what it gives; apply() then runs only the second for those gradients.
"""

import tensorflow as tf

from ringrun.tensorflow.compression import Compression
from ringrun.tensorflow.gradients import _check_options, _make_allreduce_grads_fn, _reduce_except_local
from ringrun.tensorflow.mpi_ops import Adasum, Average, Sum, global_process_set
from ringrun.tensorflow.util import _ref


class _LocalAggregation:
    """Sums the gradients of backward_passes_per_step calls before they are reduced (Horovod's
    gradient aggregation helper; ``counter`` counts the calls since the last reduction)."""

    def __init__(self, passes, average, sparse_as_dense):
        if passes <= 0:
            raise ValueError(f"backward_passes_per_step must be at least 1, not {passes}")
        self.passes = passes
        self.average = average
        self.sparse_as_dense = sparse_as_dense
        with tf.init_scope():
            self.counter = tf.Variable(0, dtype=tf.int64, trainable=False, name='ringrun_aggregation_counter')
        self.sums = None

    def _dense(self, grads):
        dense = []
        for g in grads:
            if isinstance(g, tf.IndexedSlices):
                if not self.sparse_as_dense:
                    raise ValueError("backward_passes_per_step > 1 sums gradients locally: tf.IndexedSlices need "
                                     "sparse_as_dense=True")
                g = tf.convert_to_tensor(g)
            dense.append(g)
        return dense

    def aggregate(self, grads, reduce):
        """Adds this call's gradients to the sums; on the N-th call returns the sums reduced (and
        divided by N when averaging) and clears them, else the sums so far."""
        grads = self._dense(grads)
        if self.sums is None:
            with tf.init_scope():  # once, outside any tf.function being traced
                self.sums = [None if g is None else tf.Variable(tf.zeros(g.shape, g.dtype), trainable=False)
                             for g in grads]
        present = [i for i, s in enumerate(self.sums) if s is not None and grads[i] is not None]
        for i in present:
            self.sums[i].assign_add(grads[i])
        self.counter.assign_add(1)

        def reduce_and_clear():
            summed = [self.sums[i].read_value() for i in present]
            reduced = reduce([summed[present.index(i)] if i in present else None for i in range(len(grads))])
            reduced = [reduced[i] / self.passes if self.average else reduced[i] for i in present]
            with tf.control_dependencies(reduced):
                self.counter.assign(0)
                for i in present:
                    self.sums[i].assign(tf.zeros_like(self.sums[i]))
            return [tf.identity(r) for r in reduced]

        results = tf.cond(tf.equal(self.counter, self.passes), reduce_and_clear,
                          lambda: [self.sums[i].read_value() for i in present])
        out = [None] * len(grads)
        for i, r in zip(present, results):
            out[i] = r
        return out


def _check_not_xla():
    from tensorflow.python.ops import control_flow_util
    graph = tf.compat.v1.get_default_graph()
    if control_flow_util.GraphOrParentsInXlaContext(graph):
        raise ValueError("DistributedOptimizer: ringrun's collectives do not run inside XLA; compile the model "
                         "with jit_compile=False (Keras turns XLA on by default where a GPU is visible)")


class _DistributedOptimizer:
    """Mixed in before the wrapped optimizer's class: reduces the gradients in apply()."""

    def register_local_var(self, var):
        """Keeps the gradient of ``var`` local: not averaged over the ranks (only divided by the
        process set's size when scale_local_gradients)."""
        self._ringrun_local.add(_ref(var))

    def _ringrun_reduce(self, grads, variables):
        """The first phase: this call's gradients averaged over the ranks (or aggregated)."""
        def reduce(gs):
            return _reduce_except_local(self._ringrun_allreduce, gs, variables, self._ringrun_local,
                                        self._ringrun_scale_local, self.process_set)
        if self._agg_helper is None:
            return reduce(list(grads))
        return self._agg_helper.aggregate(list(grads), reduce)

    def apply(self, grads, trainable_variables=None):
        _check_not_xla()
        grads = list(grads)
        variables = list(self._trainable_variables if trainable_variables is None else trainable_variables)
        if not self.built:
            self.build(variables)
        reduced = self._ringrun_reduced_ids
        self._ringrun_reduced_ids = set()
        if not (grads and all(g is None or id(g) in reduced for g in grads)):
            grads = self._ringrun_reduce(grads, variables)
        apply = super().apply
        if self._agg_helper is None:
            return apply(grads, variables)

        def only_count():
            self.iterations.assign_add(1)

        tf.cond(tf.equal(self._agg_helper.counter, 0), lambda: apply(grads, variables), only_count)

    def apply_gradients(self, grads_and_vars, **kwargs):
        """Keras' apply_gradients; Horovod's keyword ``experimental_aggregate_gradients`` (Keras 2)
        is accepted and has no effect."""
        kwargs.pop('experimental_aggregate_gradients', None)
        if kwargs:
            raise TypeError(f"apply_gradients() got unexpected keyword arguments {sorted(kwargs)}")
        return super().apply_gradients(grads_and_vars)

    def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
        """Horovod's (Keras 2) compute step: (gradient, variable) pairs of ``loss`` (a tensor
        recorded by ``tape``, or a callable), the gradients averaged over the ranks (or aggregated,
        with backward_passes_per_step). Passed to apply_gradients(), they are not reduced again."""
        var_list = list(var_list)
        if tape is None:
            tape = tf.GradientTape()
            with tape:
                tape.watch(var_list)
                loss = loss() if callable(loss) else loss
        elif callable(loss):
            with tape:
                loss = loss()
        grads = self._ringrun_reduce(tape.gradient(loss, var_list, grad_loss), var_list)
        self._ringrun_reduced_ids = {id(g) for g in grads if g is not None}
        return list(zip(grads, var_list))

    def compute_gradients(self, loss, var_list, tape=None):
        """See _compute_gradients()."""
        return self._compute_gradients(loss, var_list, None, tape)


def create_distributed_optimizer(optimizer, name, device_dense, device_sparse, compression, sparse_as_dense,
                                 gradient_predivide_factor, op, backward_passes_per_step, average_aggregated_gradients,
                                 groups, process_set, scale_local_gradients):
    """A new optimizer of a subclass of ``optimizer``'s class (same name and module, so that a
    saved model loads without ringrun), made from its config, that reduces gradients in apply()."""
    base = optimizer.__class__
    if issubclass(base, _DistributedOptimizer):  # wrapped again: reduce once
        base = base.__bases__[1]
    cls = type(base.__name__, (_DistributedOptimizer, base), {'__module__': base.__module__})
    distributed = cls.from_config(optimizer.get_config())
    label = name or f"Distributed{base.__name__}"
    distributed._ringrun_allreduce = _make_allreduce_grads_fn(label, device_dense, device_sparse, compression,
                                                              sparse_as_dense, op, gradient_predivide_factor,
                                                              groups, process_set)
    distributed._ringrun_local = set()
    distributed._ringrun_scale_local = scale_local_gradients
    distributed._agg_helper = (None if backward_passes_per_step == 1 else
                               _LocalAggregation(backward_passes_per_step, average_aggregated_gradients,
                                                 sparse_as_dense))
    distributed._ringrun_reduced_ids = set()
    distributed.process_set = process_set
    return distributed


def DistributedOptimizer(optimizer, name=None, device_dense='', device_sparse='', compression=Compression.none,
                         sparse_as_dense=False, gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1,
                         average_aggregated_gradients=False, num_groups=0, groups=None, process_set=global_process_set,
                         scale_local_gradients=True):
    """Wraps a Keras 3 optimizer so that it averages the gradients over the ranks before applying
    them (in ``apply()``, which ``model.fit``, ``train_on_batch`` and ``apply_gradients`` call)::

        opt = hvd.DistributedOptimizer(keras.optimizers.Adam(0.001 * hvd.size()))
        model.compile(optimizer=opt, loss=...)

    The result is a new optimizer of a subclass of the given one's class, made from its config
    (the given optimizer's state is not carried over). ``op`` is Average, Sum or Adasum (each
    gradient combined whole by Adasum before it is applied, as horovod.keras does; floating-point
    gradients, tf.IndexedSlices with ``sparse_as_dense``); ``compression`` (Compression.fp16),
    ``sparse_as_dense``, ``gradient_predivide_factor`` and ``groups`` as in Horovod;
    ``backward_passes_per_step=N`` sums N calls' gradients locally and reduces and applies them on
    the N-th (divided by N with ``average_aggregated_gradients``); ``register_local_var()`` keeps a
    variable's gradient local. Not inside XLA: compile with ``jit_compile=False``.
    """
    if op not in (Average, Sum, Adasum):
        raise ValueError('DistributedOptimizer: op must be Average, Sum or Adasum for Keras optimizers')
    groups = _check_options(op, gradient_predivide_factor, num_groups, groups)
    return create_distributed_optimizer(optimizer, name, device_dense, device_sparse, compression, sparse_as_dense,
                                        gradient_predivide_factor, op, backward_passes_per_step,
                                        average_aggregated_gradients, groups, process_set, scale_local_gradients)


def PartialDistributedOptimizer(optimizer, name=None, device_dense='', device_sparse='', compression=Compression.none,
                                sparse_as_dense=False, gradient_predivide_factor=1.0, op=Average,
                                backward_passes_per_step=1, average_aggregated_gradients=False, groups=None,
                                process_set=global_process_set, local_layers=None, scale_local_gradients=True):
    """DistributedOptimizer whose ``local_layers`` (Keras layers) keep their gradients local."""
    distributed = DistributedOptimizer(optimizer, name, device_dense, device_sparse, compression, sparse_as_dense,
                                       gradient_predivide_factor, op, backward_passes_per_step,
                                       average_aggregated_gradients, 0, groups, process_set, scale_local_gradients)
    if local_layers is not None and not isinstance(local_layers, (list, tuple)):
        local_layers = [local_layers]
    for layer in local_layers or []:
        for var in layer.trainable_weights:
            distributed.register_local_var(var)
    return distributed
