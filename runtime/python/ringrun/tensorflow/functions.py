"""Variable and object broadcasts: horovod.tensorflow's functions over ringrun's collectives."""

import tensorflow as tf

from ringrun.common import objects as _objects
from ringrun.tensorflow.mpi_ops import _process_set_id, broadcast, global_process_set
from ringrun.tensorflow.util import _cache, _executing_eagerly, _make_subgraph, _tf_variable


def _assign_broadcasts(variables, root_rank, process_set):
    return [var.assign(broadcast(var, root_rank, process_set=process_set)) for var in variables]


@_cache
def _make_broadcast_group_fn(process_set):
    def broadcast_group(variables, root_rank):
        _assign_broadcasts(variables, root_rank, process_set)

    if _executing_eagerly():
        # One graph for all the variables: their broadcasts reach the engine together.
        return _make_subgraph(broadcast_group)
    return lambda variables, root_rank: tf.group(*_assign_broadcasts(variables, root_rank, process_set))


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False):
    """Overwrites ``variables`` with ``root_rank``'s values (a global rank) on every rank of
    ``process_set``: at the start of training (``broadcast_variables(model.variables,
    root_rank=0)``) or after loading a checkpoint on one rank. Eagerly it runs at once; in a graph
    it returns the op that does it. ``inplace`` is accepted for Horovod's signature: each variable
    takes the broadcast's output buffer anyway.
    """
    _process_set_id(process_set, "broadcast_variables")
    variables = [_tf_variable(v) for v in variables]
    if not variables:
        return None if _executing_eagerly() else tf.no_op()
    return _make_broadcast_group_fn(process_set)(variables, root_rank)


def broadcast_global_variables(root_rank):
    """Broadcasts TensorFlow 1's global variables (a graph built with tf.compat.v1) and returns
    the op; raises RuntimeError eagerly, where there are none: use broadcast_variables()."""
    if _executing_eagerly():
        raise RuntimeError("broadcast_global_variables() does not apply eagerly (there are no global variables); "
                           "use broadcast_variables(model.variables, root_rank) instead")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """Returns root_rank's ``obj`` on every rank (any picklable object). ``session`` is accepted
    for Horovod's TensorFlow 1 signature and not needed: the bytes go through the engine directly.

    ``name`` (the same on every rank) defaults to 'broadcast_object', not the type's name as in
    Horovod, so that ranks passing None instead of the object still match.
    """
    return _objects.broadcast_object(obj, root_rank, name, process_set=process_set)


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """A function that broadcasts an object from ``root_rank`` (Horovod's TensorFlow 1 helper)."""
    return lambda obj: _objects.broadcast_object(obj, root_rank, name or 'broadcast_object_fn',
                                                 process_set=process_set)


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """Returns the list of every rank's ``obj`` (picklable; may differ per rank), by rank."""
    return _objects.allgather_object(obj, name, process_set=process_set)
