"""broadcast_object and allgather_object for every binding: any picklable object, sent as bytes
through the engine's named ops. No framework and no numpy: a torch-only environment has none.
"""

import ctypes
import pickle

from ringrun import _ringrun
from ringrun.common.basics import _root_index, _set_id, global_process_set, rank

# Buffers of ops whose wait was interrupted (Ctrl-C): the engine may still write into them.
_abandoned = []


def _address(buffer):
    return ctypes.addressof((ctypes.c_char * len(buffer)).from_buffer(buffer)) if len(buffer) else 0


def _wait(handle, *buffers):
    try:
        _ringrun.wait(handle)
    except (KeyboardInterrupt, SystemExit):
        _abandoned.append(buffers)
        raise


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns root_rank's obj on every rank of the set (any picklable object, e.g. a state_dict or
    an epoch).

    Arguments:
        obj: the object to send (ignored on the other ranks).
        root_rank: the (global) rank that sends.
        name: the broadcasts' name, the same on every rank; default 'broadcast_object' (not the
            type's name as in Horovod, so that ranks passing None instead of obj still match).
        process_set: the ranks that take part (default: every rank).
    """
    name = name or 'broadcast_object'
    set_id = _set_id(process_set, 'broadcast_object')
    root = _root_index(root_rank, process_set, 'broadcast_object')
    sending = rank() == root_rank
    data = bytearray(pickle.dumps(obj)) if sending else bytearray()
    length = bytearray(len(data).to_bytes(8, 'little'))
    handle, _ = _ringrun.submit(_ringrun.BROADCAST, f'broadcast.{name}.sz', _address(length), _address(length), 1,
                                _ringrun.INT64, root=root, shape=[1], process_set=set_id)
    _wait(handle, length)
    if not sending:
        data = bytearray(int.from_bytes(length, 'little'))
    handle, _ = _ringrun.submit(_ringrun.BROADCAST, f'broadcast.{name}.t', _address(data), _address(data), len(data),
                                _ringrun.UINT8, root=root, shape=[len(data)], process_set=set_id)
    _wait(handle, data)
    return obj if sending else pickle.loads(data)


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns the list of every rank's obj, indexed by rank within the set (objects may differ per
    rank).

    Arguments:
        obj: this rank's picklable object.
        name: the allgather's name, the same on every rank; default 'allgather_object' (not the
            type's name as in Horovod, so that objects of different types still match).
        process_set: the ranks that take part (default: every rank).
    """
    name = name or 'allgather_object'
    set_id = _set_id(process_set, 'allgather_object')
    data = bytearray(pickle.dumps(obj))
    # One allgather of a different length per rank: the engine sizes the output.
    handle, output = _ringrun.submit(_ringrun.ALLGATHER, f'allgather.{name}', _address(data), 0, len(data),
                                     _ringrun.UINT8, shape=[len(data)], variable=True, process_set=set_id)
    _wait(handle, data, output)
    gathered = memoryview(output)
    objects, start = [], 0
    for n in output.rows:
        objects.append(pickle.loads(gathered[start:start + n]))
        start += n
    return objects
