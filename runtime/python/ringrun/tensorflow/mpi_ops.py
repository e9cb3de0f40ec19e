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
    mpi_threads_supported, rank, remove_process_set, rocm_built, shutdown, size)
from ringrun.common import basics as _common
from ringrun.tensorflow import _library
from ringrun.tensorflow.util import _executing_eagerly

_ops = _library.load()

# The collectives are stateful ops (ops.cpp says why) that tf.function must not chain in program
# order, as it does not chain TensorFlow's own collectives: independent ones must reach the engine
# together to be fused, and ranks may reach them in different orders.
_COLLECTIVE_OPS = ('RingrunAllreduce', 'RingrunGroupedAllreduce', 'RingrunAllgather', 'RingrunGroupedAllgather',
                   'RingrunBroadcast', 'RingrunAlltoall', 'RingrunReducescatter', 'RingrunGroupedReducescatter')
auto_control_deps.ASYNC_STATEFUL_OPS = auto_control_deps.ASYNC_STATEFUL_OPS | frozenset(_COLLECTIVE_OPS)


def init(comm=None, process_sets=None):
    """Joins this process to the job that ``ringrun`` started (rendezvous with every rank).

    Safe to call again. ``comm`` (an MPI communicator) and ``process_sets`` are Horovod options
    that ringrun does not have: passing them raises NotImplementedError.
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


def start_timeline(file_path, mark_cycles=False):
    """Raises NotImplementedError: ringrun's timeline is started by the launcher
    (``ringrun --timeline-filename FILE``), for the whole run."""
    raise NotImplementedError("start_timeline: start the job with ringrun --timeline-filename FILE "
                              "(--timeline-mark-cycles) instead")


def stop_timeline():
    """Raises NotImplementedError: see start_timeline()."""
    raise NotImplementedError("stop_timeline: ringrun's timeline covers the whole run (--timeline-filename)")


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


def _op_code(op, average, what):
    """The C op of Horovod's (op, average) pair (op=None: Average); Adasum is ringrun.torch's only, for now."""
    op = _common._op_code(op, average, what)
    if op == Adasum:
        raise NotImplementedError(f"{what}: op=Adasum is not in ringrun.tensorflow's ops yet (ringrun.torch has it); "
                                  "use Average or Sum")
    return op


def _check_process_set(process_set, what):
    """The id of a process_set argument; the TensorFlow ops run on every rank only (for now)."""
    set_id = _common._set_id(process_set, what)
    if set_id != 0:
        raise NotImplementedError(f"{what}: process sets are not in ringrun.tensorflow's ops yet; the engine has "
                                  "them (ringrun.torch uses them): run this op on global_process_set")
    return set_id


def _process_set_id(process_set, what):
    return _check_process_set(process_set, what)


def _reduction(make, kind, inputs, name, op, prescale_factor, postscale_factor, ignore_name_scope, process_set):
    """One of the reducing ops (``make``: its generated wrapper) over ``inputs``."""
    return make(inputs, name=_graph_name(kind, inputs if isinstance(inputs, (list, tuple)) else [inputs], name),
                reduce_op=op, prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                ignore_name_scope=ignore_name_scope, process_set_id=_process_set_id(process_set, kind))


def _same_reduction(op):
    """The reduction arguments of a reducing op, for its gradient."""
    return dict(op=op.get_attr('reduce_op'), prescale_factor=op.get_attr('prescale_factor'),
                postscale_factor=op.get_attr('postscale_factor'), ignore_name_scope=op.get_attr('ignore_name_scope'))


def _allreduce(tensor, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0, ignore_name_scope=False,
               process_set=global_process_set):
    """The allreduce op: ``tensor`` reduced over every rank with ``op`` (Sum by default), after
    multiplying it by ``prescale_factor``; the result multiplied by ``postscale_factor``."""
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
    """Every rank's ``tensor`` concatenated on the first dimension in rank order. The first
    dimension may differ per rank; the others and the dtype must match (else every rank raises
    FailedPreconditionError naming each rank's shape). Differentiable."""
    return _ops.ringrun_allgather(tensor, name=_graph_name('RingrunAllgather', [tensor], name),
                                  ignore_name_scope=ignore_name_scope,
                                  process_set_id=_process_set_id(process_set, "allgather"))


def _own_rows(grad, inputs, ignore_name_scope):
    """This rank's rows of the averaged gradient of an allgather whose inputs were ``inputs``."""
    with tf.device('/cpu:0'):  # a static count of splits: tf.split needs it in a graph
        rows = [tf.reshape(allgather(tf.reshape(tf.shape(x)[0], [1]), ignore_name_scope=ignore_name_scope), [size()])
                for x in inputs]
    return [tf.split(g, num_or_size_splits=r, axis=0)[rank()] for g, r in zip(grad, rows)]


@ops.RegisterGradient('RingrunAllgather')
def _allgather_grad(op, grad):
    """The gradient of an allgather: this rank's rows of the gradient averaged over the ranks."""
    ignore = op.get_attr('ignore_name_scope')
    return _own_rows([_allreduce(grad, op=Average, ignore_name_scope=ignore)], op.inputs, ignore)[0]


def grouped_allgather(tensors, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Allgathers of a list of tensors as one op. Differentiable."""
    return _ops.ringrun_grouped_allgather(tensors, name=_graph_name('RingrunGroupedAllgather', tensors, name),
                                          ignore_name_scope=ignore_name_scope,
                                          process_set_id=_process_set_id(process_set, "grouped_allgather"))


@ops.RegisterGradient('RingrunGroupedAllgather')
def _grouped_allgather_grad(op, *grads):
    # One allreduce each: TensorFlow may hand float32 zeros for an unused float64 output.
    ignore = op.get_attr('ignore_name_scope')
    reduced = [_allreduce(g, op=Average, ignore_name_scope=ignore) for g in grads]
    return _own_rows(reduced, list(op.inputs), ignore)


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False, process_set=global_process_set):
    """``root_rank``'s ``tensor`` on every rank (shape and dtype must match). Differentiable: the
    gradient is the averaged gradient on the root, zero elsewhere."""
    return _ops.ringrun_broadcast(tensor, name=_graph_name('RingrunBroadcast', [tensor], name), root_rank=root_rank,
                                  ignore_name_scope=ignore_name_scope,
                                  process_set_id=_process_set_id(process_set, "broadcast"))


@ops.RegisterGradient('RingrunBroadcast')
def _broadcast_grad(op, grad):
    reduced = _allreduce(grad, op=Average, ignore_name_scope=op.get_attr('ignore_name_scope'))
    return reduced if rank() == op.get_attr('root_rank') else reduced * 0


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Overwrites ``variables`` (a list) with ``root_rank``'s values on every rank and returns
    their new values. The assignment takes the broadcast's output buffer (no copy when TensorFlow
    hands it over)."""
    _check_process_set(process_set, "broadcast_")
    values = []
    for i, var in enumerate(variables):
        op_name = None if name is None else f"{name}_{i}"
        values.append(var.assign(broadcast(var, root_rank, name=op_name)))
    return values


def alltoall(tensor, splits=None, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Sends ``splits[r]`` rows of ``tensor`` to rank r (the first dimension divided evenly when
    splits is None) and returns what every rank sent here, in rank order; with ``splits``, also the
    rows received from each rank. Differentiable."""
    given = tf.convert_to_tensor(splits, dtype=tf.int32) if splits is not None else tf.constant([], dtype=tf.int32)
    output, received = _ops.ringrun_alltoall(tensor, splits=given, name=_graph_name('RingrunAlltoall', [tensor], name),
                                             ignore_name_scope=ignore_name_scope,
                                             process_set_id=_process_set_id(process_set, "alltoall"))
    return (output, received) if splits is not None else output


@ops.RegisterGradient('RingrunAlltoall')
def _alltoall_grad(op, grad_output, grad_received_splits):
    """The gradient of an alltoall is the alltoall of the gradient back along the received splits."""
    grad, _ = alltoall(grad_output, splits=op.outputs[1], ignore_name_scope=op.get_attr('ignore_name_scope'))
    return [grad, None]


def _reducescatter(tensor, name=None, op=Sum, ignore_name_scope=False, process_set=global_process_set,
                   prescale_factor=1.0, postscale_factor=1.0):
    """The reducescatter op: this rank's rows (the first size() % rows ranks one more) of
    ``tensor`` reduced over every rank."""
    return _reduction(_ops.ringrun_reducescatter, 'RingrunReducescatter', tensor, name, op, prescale_factor,
                      postscale_factor, ignore_name_scope, process_set)


def _scatter_grad_scale(op, grads):
    factor = op.get_attr('prescale_factor') * op.get_attr('postscale_factor')
    if op.get_attr('reduce_op') == Sum:
        factor *= size()
    return [g * factor if factor != 1.0 else g for g in grads]


@ops.RegisterGradient('RingrunReducescatter')
def _reducescatter_grad(op, grad):
    """The gradient of a reducescatter is the allgather of the (scaled) gradient."""
    (scaled,) = _scatter_grad_scale(op, [grad])
    return allgather(scaled, ignore_name_scope=op.get_attr('ignore_name_scope'))


def _grouped_reducescatter(tensors, name=None, op=Sum, ignore_name_scope=False, process_set=global_process_set,
                           prescale_factor=1.0, postscale_factor=1.0):
    """Reducescatters of a list of tensors (of one dtype) as one op."""
    return _reduction(_ops.ringrun_grouped_reducescatter, 'RingrunGroupedReducescatter', list(tensors), name, op,
                      prescale_factor, postscale_factor, ignore_name_scope, process_set)


@ops.RegisterGradient('RingrunGroupedReducescatter')
def _grouped_reducescatter_grad(op, *grads):
    ignore = op.get_attr('ignore_name_scope')
    return [allgather(g, ignore_name_scope=ignore) for g in _scatter_grad_scale(op, grads)]


def join():
    """Waits until every rank has called join() and returns the rank that called it last.

    Unlike Horovod's, a rank that has joined does not stand in for allreduces the other ranks
    still submit: every rank must submit the same collectives before joining.
    """
    return _ops.ringrun_join()


def barrier(process_set=global_process_set):
    """Returns once every rank has reached it (an op in a graph)."""
    return _ops.ringrun_barrier(process_set_id=_process_set_id(process_set, "barrier"))


def size_op(process_set_id=0, name=None):
    """size() as an op, read when the graph runs (it changes in an elastic job)."""
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
    """1 as an op when this rank is in the process set (always, for the global one)."""
    return _ops.ringrun_process_set_included(process_set_id=process_set_id, name=name)


def _size_in(dtype, process_set=global_process_set):
    """size() as a tensor of ``dtype``: an op in an elastic job (graphs outlive a reset), else a constant."""
    if _ringrun.elastic_enabled():
        return tf.cast(size_op(), dtype)
    return tf.cast(size(), dtype)


for _op_type in ('RingrunSize', 'RingrunLocalSize', 'RingrunRank', 'RingrunLocalRank', 'RingrunProcessSetIncluded',
                 'RingrunJoin', 'RingrunBarrier'):
    ops.NotDifferentiable(_op_type)
