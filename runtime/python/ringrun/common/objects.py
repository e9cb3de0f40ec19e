"""broadcast_object and allgather_object for every binding: any picklable object, sent as bytes
through the engine's named ops (no framework tensor involved)."""

import pickle

import numpy as np

from ringrun import _ringrun


def _run(handle):
    _ringrun.wait(handle)


def _broadcast(array, root_rank, name):
    _run(_ringrun.broadcast_async(name, array.ctypes.data, array.size, _DTYPES[array.dtype], root_rank))


def _allgather(array, name):
    gathered = np.empty(array.size * _ringrun.size(), dtype=array.dtype)
    _run(_ringrun.allgather_async(name, array.ctypes.data, array.size, _DTYPES[array.dtype], gathered.ctypes.data))
    return gathered


_DTYPES = {np.dtype(np.uint8): _ringrun.UINT8, np.dtype(np.int64): _ringrun.INT64}


def broadcast_object(obj, root_rank=0, name=None):
    """Returns root_rank's obj on every rank (any picklable object, e.g. a state_dict or an epoch).

    Arguments:
        obj: the object to send (ignored on the other ranks).
        root_rank: the rank that sends.
        name: the broadcasts' name, the same on every rank; default 'broadcast_object' (not the
            type's name as in Horovod, so that ranks passing None instead of obj still match).
    """
    if name is None:
        name = 'broadcast_object'
    root = _ringrun.rank() == root_rank
    data = np.frombuffer(pickle.dumps(obj), dtype=np.uint8).copy() if root else None
    length = np.array([data.size if root else 0], dtype=np.int64)
    _broadcast(length, root_rank, name + '.sz')
    if not root:
        data = np.empty(int(length[0]), dtype=np.uint8)
    _broadcast(data, root_rank, name + '.t')
    return obj if root else pickle.loads(data.tobytes())


def allgather_object(obj, name=None):
    """Returns the list of every rank's obj, indexed by rank (objects may differ per rank).

    Arguments:
        obj: this rank's picklable object.
        name: the allgathers' name, the same on every rank; default 'allgather_object' (not the
            type's name as in Horovod, so that objects of different types still match).
    """
    if name is None:
        name = 'allgather_object'
    data = pickle.dumps(obj)
    sizes = _allgather(np.array([len(data)], dtype=np.int64), name + '.sz')
    padded = int(sizes.max())
    mine = np.zeros(padded, dtype=np.uint8)
    mine[:len(data)] = np.frombuffer(data, dtype=np.uint8)
    gathered = _allgather(mine, name + '.t')
    return [pickle.loads(gathered[r * padded:r * padded + int(n)].tobytes()) for r, n in enumerate(sizes)]
