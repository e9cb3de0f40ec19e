"""horovod.tensorflow's public reductions: allreduce and grouped_allreduce (dense tensors, and
tf.IndexedSlices through allgathers), reducescatter and grouped_reducescatter, with compression."""

import tensorflow as tf

from ringrun.tensorflow.compression import Compression
from ringrun.tensorflow.mpi_ops import (Adasum, Average, Sum, _allreduce, _grouped_allreduce, _grouped_reducescatter,
                                        _op_code, _process_set_id, _reducescatter, _size_in, allgather,
                                        global_process_set, grouped_allgather)


def _check_sparse(op, prescale_factor, postscale_factor):
    if op == Adasum:
        raise NotImplementedError('allreduce: op=Adasum does not combine tf.IndexedSlices (as in Horovod); pass '
                                  'sparse_as_dense=True to DistributedOptimizer/DistributedGradientTape or '
                                  'tf.convert_to_tensor() them')
    if op not in (Sum, Average):
        raise NotImplementedError('allreduce: only Sum and Average reduce tf.IndexedSlices (they are allgathered); '
                                  'pass sparse_as_dense=True or tf.convert_to_tensor() them for other ops')
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        raise NotImplementedError('allreduce: prescale_factor/postscale_factor do not apply to tf.IndexedSlices; '
                                  'scale the values yourself')


def _sparse_result(slices, values, indices, op, process_set):
    if op == Average:
        values = values / _size_in(values.dtype, process_set)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


def allreduce(tensor, average=None, device_dense='', device_sparse='', compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, name=None, process_set=global_process_set,
              ignore_name_scope=False):
    """The reduction of ``tensor`` (tf.Tensor, tf.Variable or tf.IndexedSlices) over the ranks of
    ``process_set`` (every rank by default).

    ``op`` is Average (the default, also for ``op=None``), Sum, Min, Max, Product or Adasum
    (``average`` is Horovod's deprecated form; Adasum combines whole floating-point tensors, on any
    number of ranks). ``prescale_factor`` multiplies the input before the reduction,
    ``postscale_factor`` the result. ``compression=Compression.fp16`` sends floats as float16.
    tf.IndexedSlices are allgathered (values and indices; Sum and Average only). The shape and
    dtype must match on every rank, else every rank raises FailedPreconditionError naming the
    shapes.
    """
    _process_set_id(process_set, "allreduce")
    op = _op_code(op, average, "allreduce")
    if isinstance(tensor, tf.IndexedSlices):
        _check_sparse(op, prescale_factor, postscale_factor)
        with tf.device(device_sparse):
            values = allgather(tensor.values, ignore_name_scope=ignore_name_scope, process_set=process_set)
            indices = allgather(tensor.indices, ignore_name_scope=ignore_name_scope, process_set=process_set)
            return _sparse_result(tensor, values, indices, op, process_set)
    with tf.device(device_dense):
        compressed, ctx = compression.compress(tensor)
        reduced = _allreduce(compressed, op=op, prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                             name=name, ignore_name_scope=ignore_name_scope, process_set=process_set)
        return compression.decompress(reduced, ctx)


def grouped_allreduce(tensors, average=None, device_dense='', device_sparse='', compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set,
                      ignore_name_scope=False, name=None):
    """allreduce of a list of tensors submitted together (the engine fuses them); dense tensors
    must share one dtype. Returns the list of results in order."""
    if not tensors:
        return tensors
    _process_set_id(process_set, "grouped_allreduce")
    op = _op_code(op, average, "grouped_allreduce")
    results = [None] * len(tensors)
    sparse = [i for i, t in enumerate(tensors) if isinstance(t, tf.IndexedSlices)]
    dense = [i for i, t in enumerate(tensors) if not isinstance(t, tf.IndexedSlices)]
    if sparse:
        _check_sparse(op, prescale_factor, postscale_factor)
        with tf.device(device_sparse):
            values = grouped_allgather([tensors[i].values for i in sparse], ignore_name_scope=ignore_name_scope,
                                       process_set=process_set)
            indices = grouped_allgather([tensors[i].indices for i in sparse], ignore_name_scope=ignore_name_scope,
                                        process_set=process_set)
            for i, v, x in zip(sparse, values, indices):
                results[i] = _sparse_result(tensors[i], v, x, op, process_set)
    if dense:
        with tf.device(device_dense):
            compressed = [compression.compress(tensors[i]) for i in dense]
            reduced = _grouped_allreduce([c for c, _ in compressed], op=op, prescale_factor=prescale_factor,
                                         postscale_factor=postscale_factor, name=name,
                                         ignore_name_scope=ignore_name_scope, process_set=process_set)
            for i, r, (_, ctx) in zip(dense, reduced, compressed):
                results[i] = compression.decompress(r, ctx)
    return results


def reducescatter(tensor, device_dense='', compression=Compression.none, op=Average, name=None,
                  process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0,
                  postscale_factor=1.0):
    """This rank's share of ``tensor`` reduced over the ranks of ``process_set`` (Average by
    default, or Sum): the first dimension split over the ranks, the first ``rows % size`` ranks one
    row more. The engine's reduce-scatter moves each rank half an allreduce's bytes.
    """
    _process_set_id(process_set, "reducescatter")
    if op not in (Average, Sum):
        raise ValueError('reducescatter: op must be Average or Sum')
    with tf.device(device_dense):
        compressed, ctx = compression.compress(tensor)
        share = _reducescatter(compressed, op=op, name=name, ignore_name_scope=ignore_name_scope,
                               process_set=process_set, prescale_factor=prescale_factor,
                               postscale_factor=postscale_factor)
        return compression.decompress(share, ctx)


def grouped_reducescatter(tensors, device_dense='', compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """reducescatter of a list of tensors (of one dtype) submitted together."""
    if not tensors:
        return tensors
    _process_set_id(process_set, "grouped_reducescatter")
    if op not in (Average, Sum):
        raise ValueError('grouped_reducescatter: op must be Average or Sum')
    with tf.device(device_dense):
        compressed = [compression.compress(t) for t in tensors]
        shares = _grouped_reducescatter([c for c, _ in compressed], op=op, prescale_factor=prescale_factor,
                                        postscale_factor=postscale_factor, process_set=process_set)
        return [compression.decompress(s, ctx) for s, (_, ctx) in zip(shares, compressed)]
