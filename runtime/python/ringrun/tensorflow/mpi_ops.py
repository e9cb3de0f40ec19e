"""The ops of ringrun's TensorFlow library, with ``horovod.tensorflow.mpi_ops``'s names and
gradients, and the basics (init, ranks, reduction ops) re-exported.

Every collective is a TensorFlow op whose async kernel enqueues TensorFlow's buffers into the
engine; the engine keys it by the node's name, which must therefore be the same on every rank (as
it is when the ranks build the same graph). In a graph the name is ``Ringrun<Op>_<input name>``
unless given; eagerly, ops run one at a time under the op's own name.
"""

import re

import tensorflow as tf
from tensorflow.python.framework import auto_control_deps, ops

from ringrun import _ringrun
from ringrun.common.basics import (  # noqa: F401 - horovod.tensorflow.mpi_ops's names
    Adasum, Average, HorovodInternalError, HostsUpdatedInterrupt, InternalError, Max, Min, Product, ProcessSet,
    Sum, add_process_set, cross_rank, cross_size, global_process_set, gloo_built,
    gloo_enabled, is_homogeneous, is_initialized, local_rank, local_size, mpi_built, mpi_enabled,
    mpi_threads_supported, rank, remove_process_set, rocm_built, shutdown, size, start_timeline, stop_timeline)
from ringrun.common import basics as _common
from ringrun.tensorflow import _library
from ringrun.tensorflow.util import _executing_eagerly

# Public: ringrun.tensorflow exports these (its __init__ star-imports this module).
__all__ = ['Adasum', 'Average', 'HorovodInternalError', 'HostsUpdatedInterrupt', 'InternalError', 'Max', 'Min',
           'Product', 'ProcessSet', 'Sum', 'add_process_set', 'allgather', 'alltoall', 'barrier',
           'broadcast', 'broadcast_', 'ccl_built', 'check_num_rank_power_of_2', 'cross_rank', 'cross_size',
           'cuda_built', 'ddl_built', 'global_process_set', 'gloo_built', 'gloo_enabled',
           'grouped_allgather', 'handle_average_backwards_compatibility', 'init', 'is_homogeneous',
           'is_initialized', 'join', 'local_rank', 'local_rank_op', 'local_size', 'local_size_op',
           'mpi_built', 'mpi_enabled', 'mpi_threads_supported', 'nccl_built', 'process_set_included_op',
           'rank', 'rank_op', 'remove_process_set', 'rocm_built', 'shutdown', 'size', 'size_op',
           'start_timeline', 'stop_timeline']


_ops = _library.load()

# The collectives are stateful ops (ops.cpp says why) that tf.function must not chain in program
# order, as it does not chain TensorFlow's own collectives: independent ones must reach the engine
# together to be fused, and ranks may reach them in different orders.
_COLLECTIVE_OPS = ('RingrunAllreduce', 'RingrunGroupedAllreduce', 'RingrunAllgather', 'RingrunGroupedAllgather',
                   'RingrunBroadcast', 'RingrunAlltoall', 'RingrunReducescatter', 'RingrunGroupedReducescatter')
auto_control_deps.ASYNC_STATEFUL_OPS = auto_control_deps.ASYNC_STATEFUL_OPS | frozenset(_COLLECTIVE_OPS)


def init(comm=None, process_sets=None):
    """Joins this process to the job that ``ringrun`` started (rendezvous with every rank), then
    registers ``process_sets`` (ProcessSet objects or lists of global ranks, the same on every
    rank; ``"dynamic"`` is accepted and changes nothing: sets can always be added).

    Safe to call again. ``comm`` (an MPI communicator) is Horovod's option for running inside an
    MPI program, which ringrun does not have: passing it raises NotImplementedError.
    """
    _common._init(comm, process_sets, "ringrun.tensorflow")


def nccl_built():
    """0: ringrun.tensorflow's kernels run on host memory (TensorFlow copies GPU tensors to them);
    Horovod returns NCCL's version where it reduces GPU tensors with NCCL."""
    return 0


def cuda_built():
    """False: see nccl_built()."""
    return False


def ccl_built():
    """False: ringrun has no oneCCL build."""
    return False


def ddl_built():
    """False: ringrun has no IBM DDL build."""
    return False


def check_num_rank_power_of_2(num_rank):
    """True when num_rank is a power of 2 (Horovod's Adasum precondition)."""
    return num_rank > 0 and (num_rank & (num_rank - 1)) == 0


def handle_average_backwards_compatibility(op, average):
    """The op of Horovod's (op, average) pair: op=None means Average."""
    return _op_code(op, average, "allreduce")


def _normalize_name(name):
    """A tensor's name as the rest of an op name (TensorFlow's name rules)."""
    return re.sub('[^a-zA-Z0-9_]', '_', name)


def _graph_name(kind, tensors, name):
    """The node name of a collective: the given one, else one derived from its inputs' names in a
    graph (the same on every rank that builds the same graph), else none (eagerly)."""
    if name is not None or _executing_eagerly():
        return name
    tensors = list(tensors)
    return _normalize_name(f"{kind}_" + "_".join(t.name for t in tensors[:1] + tensors[1:][-1:]))


_ADASUM_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)


def _op_code(op, average, what):
    """The C op of Horovod's (op, average) pair (op=None: Average)."""
    return _common._op_code(op, average, what)


def _check_adasum(op, tensors, what):
    """NotImplementedError for an Adasum of a dtype it cannot combine (ringrun(3), RINGRUN_ADASUM)."""
    if op != Adasum:
        return
    for t in tensors:
        if tf.as_dtype(t.dtype) not in _ADASUM_DTYPES:
            raise NotImplementedError(f"{what}: op=Adasum combines floating-point tensors (float16, bfloat16, "
                                      f"float32, float64), not {tf.as_dtype(t.dtype).name}; cast the tensor or use "
                                      "op=Sum or Average")


def _process_set_id(process_set, what):
    """The runtime's id of a process_set argument (0: every rank)."""
    return _common._set_id(process_set, what)


def _set_size(process_set):
    """The number of ranks of a process set."""
    return _common._set_size(process_set)


def _set_rank(process_set):
    """This rank's index in a process set."""
    return _common._set_rank(process_set)


def _set_of(op):
    """The ProcessSet of a ringrun op (its process_set_id attribute), for its gradient."""
    return _common._set_of(op.get_attr('process_set_id'))


def _reduction(make, kind, inputs, name, op, prescale_factor, postscale_factor, ignore_name_scope, process_set):
    """One of the reducing ops (``make``: its generated wrapper) over ``inputs``."""
    listed = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    _check_adasum(op, listed, kind)
    return make(inputs, name=_graph_name(kind, listed, name),
                reduce_op=op, prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                ignore_name_scope=ignore_name_scope, process_set_id=_process_set_id(process_set, kind))


def _same_reduction(op):
    """The reduction arguments of a reducing op, for its gradient."""
    return dict(op=op.get_attr('reduce_op'), prescale_factor=op.get_attr('prescale_factor'),
                postscale_factor=op.get_attr('postscale_factor'), ignore_name_scope=op.get_attr('ignore_name_scope'),
                process_set=_set_of(op))


def _allreduce(tensor, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0, ignore_name_scope=False,
               process_set=global_process_set):
    """The allreduce op: ``tensor`` reduced over the ranks of ``process_set`` with ``op`` (Sum by
    default), after multiplying it by ``prescale_factor``; the result multiplied by
    ``postscale_factor``. Ranks whose shapes differ raise FailedPreconditionError naming them."""
    return _reduction(_ops.ringrun_allreduce, 'RingrunAllreduce', tensor, name, op, prescale_factor,
                      postscale_factor, ignore_name_scope, process_set)


@ops.RegisterGradient('RingrunAllreduce')
def _allreduce_grad(op, grad):
    """The gradient of an allreduce is the allreduce (same op and factors) of the gradient."""
    return _allreduce(grad, **_same_reduction(op))


def _grouped_allreduce(tensors, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
                       ignore_name_scope=False, process_set=global_process_set):
    """Allreduces of a list of tensors (of one dtype) as one op; the engine fuses them."""
    return _reduction(_ops.ringrun_grouped_allreduce, 'RingrunGroupedAllreduce', list(tensors), name, op,
                      prescale_factor, postscale_factor, ignore_name_scope, process_set)


@ops.RegisterGradient('RingrunGroupedAllreduce')
def _grouped_allreduce_grad(op, *grads):
    return _grouped_allreduce(list(grads), **_same_reduction(op))


def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Every rank's ``tensor`` concatenated on the first dimension in rank order (the ranks of
    ``process_set``). The first dimension may differ per rank; the others and the dtype must match
    (else every rank raises FailedPreconditionError naming the shapes). Differentiable."""
    return _ops.ringrun_allgather(tensor, name=_graph_name('RingrunAllgather', [tensor], name),
                                  ignore_name_scope=ignore_name_scope,
                                  process_set_id=_process_set_id(process_set, "allgather"))


def _own_rows(grad, inputs, ignore_name_scope, process_set):
    """This rank's rows of the averaged gradient of an allgather whose inputs were ``inputs``."""
    ranks = _set_size(process_set)
    with tf.device('/cpu:0'):  # a static count of splits: tf.split needs it in a graph
        rows = [tf.reshape(allgather(tf.reshape(tf.shape(x)[0], [1]), ignore_name_scope=ignore_name_scope,
                                     process_set=process_set), [ranks])
                for x in inputs]
    return [tf.split(g, num_or_size_splits=r, axis=0)[_set_rank(process_set)] for g, r in zip(grad, rows)]


@ops.RegisterGradient('RingrunAllgather')
def _allgather_grad(op, grad):
    """The gradient of an allgather: this rank's rows of the gradient averaged over the ranks."""
    ignore, process_set = op.get_attr('ignore_name_scope'), _set_of(op)
    reduced = _allreduce(grad, op=Average, ignore_name_scope=ignore, process_set=process_set)
    return _own_rows([reduced], op.inputs, ignore, process_set)[0]


def grouped_allgather(tensors, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Allgathers of a list of tensors as one op. Differentiable."""
    return _ops.ringrun_grouped_allgather(tensors, name=_graph_name('RingrunGroupedAllgather', tensors, name),
                                          ignore_name_scope=ignore_name_scope,
                                          process_set_id=_process_set_id(process_set, "grouped_allgather"))


@ops.RegisterGradient('RingrunGroupedAllgather')
def _grouped_allgather_grad(op, *grads):
    # One allreduce each: TensorFlow may hand float32 zeros for an unused float64 output.
    ignore, process_set = op.get_attr('ignore_name_scope'), _set_of(op)
    reduced = [_allreduce(g, op=Average, ignore_name_scope=ignore, process_set=process_set) for g in grads]
    return _own_rows(reduced, list(op.inputs), ignore, process_set)


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False, process_set=global_process_set):
    """``root_rank``'s ``tensor`` on every rank of ``process_set`` (shape and dtype must match).
    ``root_rank`` is a global rank, as in Horovod (the op's ``root_rank`` attribute holds its index
    in the set). Differentiable: the gradient is the averaged gradient on the root, zero elsewhere."""
    set_id = _process_set_id(process_set, "broadcast")
    return _ops.ringrun_broadcast(tensor, name=_graph_name('RingrunBroadcast', [tensor], name),
                                  root_rank=_common._root_index(root_rank, process_set, "broadcast"),
                                  ignore_name_scope=ignore_name_scope, process_set_id=set_id)


@ops.RegisterGradient('RingrunBroadcast')
def _broadcast_grad(op, grad):
    process_set = _set_of(op)
    reduced = _allreduce(grad, op=Average, ignore_name_scope=op.get_attr('ignore_name_scope'),
                         process_set=process_set)
    return reduced if _set_rank(process_set) == op.get_attr('root_rank') else reduced * 0


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Overwrites ``variables`` (a list) with ``root_rank``'s values on every rank of
    ``process_set`` and returns their new values. The assignment takes the broadcast's output
    buffer (no copy when TensorFlow hands it over)."""
    values = []
    for i, var in enumerate(variables):
        op_name = None if name is None else f"{name}_{i}"
        values.append(var.assign(broadcast(var, root_rank, name=op_name, process_set=process_set)))
    return values


def alltoall(tensor, splits=None, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Sends ``splits[r]`` rows of ``tensor`` to rank r of ``process_set`` (the first dimension
    divided evenly when splits is None; splits may add up to fewer rows than there are) and returns
    what every rank sent here, in rank order; with ``splits``, also the rows received from each
    rank. Each rank's rows go straight to their destination. Differentiable."""
    given = tf.convert_to_tensor(splits, dtype=tf.int32) if splits is not None else tf.constant([], dtype=tf.int32)
    output, received = _ops.ringrun_alltoall(tensor, splits=given, name=_graph_name('RingrunAlltoall', [tensor], name),
                                             ignore_name_scope=ignore_name_scope,
                                             process_set_id=_process_set_id(process_set, "alltoall"))
    return (output, received) if splits is not None else output


@ops.RegisterGradient('RingrunAlltoall')
def _alltoall_grad(op, grad_output, grad_received_splits):
    """The gradient of an alltoall is the alltoall of the gradient back along the received splits."""
    grad, _ = alltoall(grad_output, splits=op.outputs[1], ignore_name_scope=op.get_attr('ignore_name_scope'),
                       process_set=_set_of(op))
    return [grad, None]


def _reducescatter(tensor, name=None, op=Sum, ignore_name_scope=False, process_set=global_process_set,
                   prescale_factor=1.0, postscale_factor=1.0):
    """The reducescatter op: this rank's rows (the first ``rows % size`` ranks one more) of
    ``tensor`` reduced over the ranks of ``process_set`` by the engine's reduce-scatter."""
    return _reduction(_ops.ringrun_reducescatter, 'RingrunReducescatter', tensor, name, op, prescale_factor,
                      postscale_factor, ignore_name_scope, process_set)


def _scatter_grad_scale(op, grads):
    factor = op.get_attr('prescale_factor') * op.get_attr('postscale_factor')
    if op.get_attr('reduce_op') == Sum:
        factor *= _set_size(_set_of(op))
    return [g * factor if factor != 1.0 else g for g in grads]


@ops.RegisterGradient('RingrunReducescatter')
def _reducescatter_grad(op, grad):
    """The gradient of a reducescatter is the allgather of the (scaled) gradient."""
    (scaled,) = _scatter_grad_scale(op, [grad])
    return allgather(scaled, ignore_name_scope=op.get_attr('ignore_name_scope'), process_set=_set_of(op))


def _grouped_reducescatter(tensors, name=None, op=Sum, ignore_name_scope=False, process_set=global_process_set,
                           prescale_factor=1.0, postscale_factor=1.0):
    """Reducescatters of a list of tensors (of one dtype) as one op."""
    return _reduction(_ops.ringrun_grouped_reducescatter, 'RingrunGroupedReducescatter', list(tensors), name, op,
                      prescale_factor, postscale_factor, ignore_name_scope, process_set)


@ops.RegisterGradient('RingrunGroupedReducescatter')
def _grouped_reducescatter_grad(op, *grads):
    ignore, process_set = op.get_attr('ignore_name_scope'), _set_of(op)
    return [allgather(g, ignore_name_scope=ignore, process_set=process_set) for g in _scatter_grad_scale(op, grads)]


def join():
    """This rank has no more data: until every rank has called join() it stands in for the
    allreduces the others still submit (with zeros, the identity of Min, Max and Product), and
    their other collectives fail. Returns the rank that joined last (an int32 scalar tensor).
    Every rank of the job calls it; it takes no process set, as in Horovod."""
    return _ops.ringrun_join()


def barrier(process_set=global_process_set):
    """Returns once every rank of ``process_set`` has reached it (an op in a graph)."""
    return _ops.ringrun_barrier(process_set_id=_process_set_id(process_set, "barrier"))


def size_op(process_set_id=0, name=None):
    """The number of ranks of the process set with this id (every rank's for 0) as an op, read
    when the graph runs (it changes in an elastic job)."""
    return _ops.ringrun_size(process_set_id=process_set_id, name=name)


def local_size_op(name=None):
    """local_size() as an op, read when the graph runs."""
    return _ops.ringrun_local_size(name=name)


def rank_op(name=None):
    """rank() as an op, read when the graph runs."""
    return _ops.ringrun_rank(name=name)


def local_rank_op(name=None):
    """local_rank() as an op, read when the graph runs."""
    return _ops.ringrun_local_rank(name=name)


def process_set_included_op(process_set_id=0, name=None):
    """1 as an op when this rank is in the process set with this id (always, for the global
    one), else 0; an id no set has raises InvalidArgumentError."""
    return _ops.ringrun_process_set_included(process_set_id=process_set_id, name=name)


def _size_in(dtype, process_set=global_process_set):
    """The process set's size as a tensor of ``dtype``: an op in an elastic job (graphs outlive a
    reset), else a constant."""
    if _ringrun.elastic_enabled():
        return tf.cast(size_op(_process_set_id(process_set, "size_op")), dtype)
    return tf.cast(_set_size(process_set), dtype)


for _op_type in ('RingrunSize', 'RingrunLocalSize', 'RingrunRank', 'RingrunLocalRank', 'RingrunProcessSetIncluded',
                 'RingrunJoin', 'RingrunBarrier'):
    ops.NotDifferentiable(_op_type)
