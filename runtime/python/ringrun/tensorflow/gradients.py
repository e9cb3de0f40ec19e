"""Averaging gradients over the ranks: the function every distributed optimizer and tape uses,
DistributedGradientTape and PartialDistributedGradientTape (horovod.tensorflow's names)."""

import tensorflow as tf

from ringrun import _ringrun
from ringrun.tensorflow.collectives import allreduce, grouped_allreduce
from ringrun.tensorflow.compression import Compression
from ringrun.tensorflow.mpi_ops import (Average, _process_set_id, _set_size, _size_in, global_process_set,
                                        size_op)
from ringrun.tensorflow.util import _cache, _executing_eagerly, _make_subgraph, _ref, refs_to_vars, vars_to_refs


def _group_plan(grads, variables, groups):
    """The indices of the gradients allreduced together, as a tuple of tuples: Horovod's
    ``groups`` (a count, or lists of variables; variables in no list get a group each)."""
    present = [i for i, g in enumerate(grads) if g is not None]
    if not isinstance(groups, list):
        count = min(groups, len(present)) or 1
        return tuple(tuple(present[k::count]) for k in range(count) if present[k::count])
    by_ref = {_ref(variables[i]): i for i in present}
    plan = []
    for group in groups:
        members = tuple(by_ref.pop(_ref(v)) for v in group if _ref(v) in by_ref)
        if members:
            plan.append(members)
    return tuple(plan) + tuple((i,) for i in by_ref.values())


def _when_several(reduce, values, process_set):
    """reduce(values) when the process set has more than one rank; in an elastic job decided when
    the graph runs (the world can shrink to one rank)."""
    if not _ringrun.elastic_enabled():
        return reduce(values) if _set_size(process_set) > 1 else values
    return tf.cond(tf.greater(size_op(_process_set_id(process_set, "size_op")), 1), lambda: reduce(values),
                   lambda: values)


@_cache
def _make_cached_allreduce_grads_fn(name, device_dense, device_sparse, compression, sparse_as_dense, op,
                                    gradient_predivide_factor, groups, process_set):
    groups = refs_to_vars(groups) if isinstance(groups, tuple) else groups
    # Average as a sum scaled before and after: gradient_predivide_factor splits the division.
    prescale, postscale = (1.0 / gradient_predivide_factor, gradient_predivide_factor) if op == Average else (1.0, 1.0)
    options = dict(device_dense=device_dense, device_sparse=device_sparse, compression=compression, op=op,
                   prescale_factor=prescale, postscale_factor=postscale, process_set=process_set)

    def reduce_each(grads, use_generic_names):
        return [None if g is None else _when_several(lambda t, i=i: allreduce(
            t, name=f"grad_{i}" if use_generic_names else None, ignore_name_scope=use_generic_names, **options), g,
            process_set) for i, g in enumerate(grads)]

    def reduce_groups(grads, plan, use_generic_names):
        reduced = [None] * len(grads)
        for k, indices in enumerate(plan):
            results = _when_several(lambda ts, k=k: grouped_allreduce(
                list(ts), name=f"grad_group_{k}" if use_generic_names else None,
                ignore_name_scope=use_generic_names, **options), [grads[i] for i in indices], process_set)
            for i, r in zip(indices, results):
                reduced[i] = r
        return reduced

    def densify_and_reduce(grads, plan, use_generic_names):
        with tf.name_scope(name + "_Allreduce"):
            if sparse_as_dense:
                grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
            return reduce_each(grads, use_generic_names) if plan is None else reduce_groups(grads, plan,
                                                                                            use_generic_names)

    # Only tensors cross into the tf.function; the grouping is decided outside, from the variables.
    reduce = _make_subgraph(densify_and_reduce) if _executing_eagerly() else densify_and_reduce

    def allreduce_grads(grads, variables=None, use_generic_names=False):
        plan = None if groups is None else _group_plan(grads, variables, groups)
        return reduce(list(grads), plan, use_generic_names)

    return allreduce_grads


def _make_allreduce_grads_fn(name, device_dense, device_sparse, compression, sparse_as_dense, op,
                             gradient_predivide_factor, groups, process_set=global_process_set):
    """The function that averages (``op``) a list of gradients over the ranks of ``process_set``: a
    tf.function when called eagerly, so that the step's allreduces reach the engine together."""
    _process_set_id(process_set, name)
    groups = vars_to_refs(groups) if isinstance(groups, list) else groups
    return _make_cached_allreduce_grads_fn(name, device_dense, device_sparse, compression, sparse_as_dense, op,
                                           gradient_predivide_factor, groups, process_set)


def _reduce_except_local(allreduce_grads, grads, variables, local_refs, scale_local, process_set,
                         use_generic_names=False):
    """grads averaged over the ranks, except those of the variables in ``local_refs``, which stay
    this rank's (divided by the process set's size when ``scale_local``, Horovod's convention)."""
    shared = [i for i, v in enumerate(variables) if _ref(v) not in local_refs]
    results = list(grads)
    reduced = allreduce_grads([grads[i] for i in shared], [variables[i] for i in shared], use_generic_names)
    for i, g in zip(shared, reduced):
        results[i] = g
    if scale_local and local_refs:
        for i, v in enumerate(variables):
            g = results[i]
            if _ref(v) in local_refs and g is not None:
                if isinstance(g, tf.IndexedSlices):
                    results[i] = tf.IndexedSlices(g.values / _size_in(g.values.dtype, process_set), g.indices,
                                                  g.dense_shape)
                else:
                    results[i] = g / _size_in(g.dtype, process_set)
    return results


def _check_options(op, gradient_predivide_factor, num_groups, groups):
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError('gradient_predivide_factor applies to op=Average only')
    if num_groups:
        groups = num_groups if groups is None else groups
    if groups is not None and not (isinstance(groups, list) or groups > 0):
        raise ValueError('groups must be a positive number of groups or a list of lists of variables')
    return groups


class _DistributedTape:
    """The gradient() of a tape whose gradients are averaged over the ranks; mixed in before the
    wrapped tape's class."""

    def register_local_source(self, source):
        """Keeps the gradient of ``source`` local: not averaged over the ranks (only divided by
        the process set's size when scale_local_gradients)."""
        self._ringrun_local.add(_ref(source))

    def gradient(self, target, sources, output_gradients=None, use_generic_names=False):
        grads = super().gradient(target, sources, output_gradients)
        if not isinstance(sources, (list, tuple)):
            return _reduce_except_local(self._ringrun_allreduce, [grads], [sources], self._ringrun_local,
                                        self._ringrun_scale_local, self.process_set, use_generic_names)[0]
        return _reduce_except_local(self._ringrun_allreduce, list(grads), list(sources), self._ringrun_local,
                                    self._ringrun_scale_local, self.process_set, use_generic_names)

    def get_local_and_global_gradients(self, target, sources, output_gradients=None, use_generic_names=False):
        """(local (variable, gradient) pairs, averaged (variable, gradient) pairs)."""
        grads = self.gradient(target, sources, output_gradients, use_generic_names)
        local, shared = [], []
        for s, g in zip(sources, grads):
            (local if _ref(s) in self._ringrun_local else shared).append((s, g))
        return local, shared


def DistributedGradientTape(gradtape, device_dense='', device_sparse='', compression=Compression.none,
                            sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0, num_groups=0,
                            groups=None, process_set=global_process_set, scale_local_gradients=True):
    """Wraps a tf.GradientTape so that ``gradient()`` returns gradients averaged over the ranks::

        with tf.GradientTape() as tape:
            loss = loss_fn(model(x), y)
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)

    ``op`` (Average, Sum, or Adasum: each gradient combined whole, as Horovod's tape does),
    ``compression``, ``sparse_as_dense`` (allreduce tf.IndexedSlices as dense tensors; Adasum needs
    it), ``gradient_predivide_factor`` (Average as a sum scaled by 1/f before and f/size after),
    ``groups`` (a count, or lists of variables, allreduced as one group each) and ``process_set``
    (the ranks that average) as in Horovod. Eagerly the allreduces run as one tf.function; in a
    tf.function they are ops of it.
    """
    groups = _check_options(op, gradient_predivide_factor, num_groups, groups)
    cls = type(gradtape.__class__.__name__, (_DistributedTape, gradtape.__class__), {})
    tape = cls.__new__(cls)
    tape.__dict__.update(gradtape.__dict__)  # the same recording: the wrapped tape's state
    tape._ringrun_allreduce = _make_allreduce_grads_fn('DistributedGradientTape', device_dense, device_sparse,
                                                       compression, sparse_as_dense, op, gradient_predivide_factor,
                                                       groups, process_set)
    tape._ringrun_local = set()
    tape._ringrun_scale_local = scale_local_gradients
    tape.process_set = process_set
    return tape


def PartialDistributedGradientTape(gradtape, device_dense='', device_sparse='', compression=Compression.none,
                                   sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0, num_groups=0,
                                   groups=None, process_set=global_process_set, local_layers=None,
                                   scale_local_gradients=True):
    """DistributedGradientTape whose ``local_layers`` (Keras layers) keep their gradients local."""
    if local_layers is None:
        local_layers = []
    elif not isinstance(local_layers, (list, tuple)):
        local_layers = [local_layers]
    if not all(hasattr(layer, 'trainable_weights') for layer in local_layers):
        raise ValueError("PartialDistributedGradientTape: local_layers must be Keras layers")
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression, sparse_as_dense, op,
                                   gradient_predivide_factor, num_groups, groups, process_set,
                                   scale_local_gradients)
    for layer in local_layers:
        for var in layer.trainable_weights:
            tape.register_local_source(var)
    return tape
