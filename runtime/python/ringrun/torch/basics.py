"""Initialisation, the rank queries, reduction ops, dtypes and the handles of pending ops.

The rest of ``ringrun.torch`` builds on these; users import them from ``ringrun.torch``.
"""

import itertools
import threading

import torch

from ringrun import _ringrun
from ringrun.common import basics as _common
from ringrun.common.basics import (  # noqa: F401 - ringrun.torch's names
    Adasum, Average, HorovodInternalError, HostsUpdatedInterrupt, InternalError, Max, Min, Product, Sum,
    _check_process_set, _op_code, _OP_NAMES, cross_rank, cross_size, global_process_set, gloo_built,
    gloo_enabled, is_homogeneous, is_initialized, local_rank, local_size, mpi_built, mpi_enabled,
    mpi_threads_supported, rank, rocm_built, shutdown, size)

_DTYPES = {
    torch.float32: _ringrun.FLOAT32,
    torch.float64: _ringrun.FLOAT64,
    torch.float16: _ringrun.FLOAT16,
    torch.bfloat16: _ringrun.BFLOAT16,
    torch.int32: _ringrun.INT32,
    torch.int64: _ringrun.INT64,
    torch.uint8: _ringrun.UINT8,
}


def init(comm=None, process_sets=None):
    """Joins this process to the job that ``ringrun`` started (rendezvous with every rank).

    Safe to call again. ``comm`` (an MPI communicator) and ``process_sets`` are Horovod options
    that ringrun does not have: passing them raises NotImplementedError.
    """
    _common._init(comm, process_sets, "ringrun.torch")


def nccl_built():
    """True when this build reduces CUDA tensors with NCCL."""
    return bool(_ringrun.NCCL_BUILT)


def cuda_built():
    """True when this build handles CUDA tensors (through NCCL)."""
    return nccl_built()


def _dtype_code(tensor, what):
    code = _DTYPES.get(tensor.dtype)
    if code is None:
        names = ", ".join(str(d).replace("torch.", "") for d in _DTYPES)
        raise ValueError(f"{what}: tensor dtype {tensor.dtype} is not supported; use one of {names}")
    return code


def _check_dense(tensor, what):
    """ValueError unless tensor is a dense torch.Tensor (before anything is allocated like it)."""
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"{what}: expected a torch.Tensor, got {type(tensor).__name__}")
    if tensor.layout != torch.strided:
        raise ValueError(f"{what}: sparse tensors are not supported; pass tensor.to_dense()")
    return tensor


def _check_tensor(tensor, what):
    """The dtype code of a tensor the runtime can take, or ValueError naming the problem."""
    _check_dense(tensor, what)
    if tensor.device.type == "cuda":
        if not nccl_built():
            raise ValueError(f"{what}: the tensor is on {tensor.device} but this ringrun build has no NCCL; "
                             "rebuild ringrun where CUDA and NCCL are installed (/usr/local/cuda), or move the tensor to the CPU")
        # The runtime reads the tensor on its own stream: work queued on torch's stream must be done.
        torch.cuda.current_stream(tensor.device).synchronize()
    elif tensor.device.type != "cpu":
        raise ValueError(f"{what}: tensors on {tensor.device} are not supported; use CPU or CUDA tensors")
    return _dtype_code(tensor, what)


# Automatic names: every rank numbers its unnamed ops of each kind in call order, so the names match
# as long as the ranks call them in the same order (as Horovod requires).
_counters = {}
_lock = threading.Lock()


def _auto_name(kind, name):
    if name is not None:
        return str(name)
    with _lock:
        counter = _counters.setdefault(kind, itertools.count())
        return f"{kind}.noname.{next(counter)}"


class _Pending:
    """One submitted op: its C handles, the tensors they use, and what completes the result."""

    __slots__ = ("handles", "keep", "finish")

    def __init__(self, handles, keep, finish):
        self.handles = handles
        self.keep = keep
        self.finish = finish


_pending = {}
_next_handle = itertools.count(1)


def _forget_pending():
    with _lock:
        _pending.clear()


_common._before_shutdown.append(_forget_pending)


def _add_pending(handles, keep, finish):
    handle = next(_next_handle)
    with _lock:
        _pending[handle] = _Pending(handles, keep, finish)
    return handle


def poll(handle):
    """True when the op behind the handle has completed; synchronize() then returns at once."""
    with _lock:
        pending = _pending.get(handle)
    if pending is None:
        raise ValueError(f"poll: handle {handle} is unknown or already synchronized")
    return all(_ringrun.test(h) for h in pending.handles)


def synchronize(handle):
    """Waits for the op behind the handle and returns its output tensor(s).

    Raises InternalError when the op failed (on every rank), ValueError for an unknown handle.
    """
    with _lock:
        pending = _pending.pop(handle, None)
    if pending is None:
        raise ValueError(f"synchronize: handle {handle} is unknown or already synchronized")
    error = None
    for h in pending.handles:  # every handle is waited (and released), even after a failure
        try:
            _ringrun.wait(h)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            error = error or e
    if error is not None:
        raise error
    return pending.finish()


def _completed(value):
    """A handle whose op already ran (synchronously); synchronize() returns value."""
    return _add_pending((), None, lambda: value)


def _drop_pending():
    """Waits for (and releases) every pending op's C handles, ignoring their errors: before an
    elastic reset, whose failed ops the caller will never synchronize."""
    with _lock:
        pending = list(_pending.values())
        _pending.clear()
    for p in pending:
        for h in p.handles:
            try:
                _ringrun.wait(h)
            except Exception:  # noqa: BLE001 - the op belonged to the world being left
                pass


def _reset_names():
    """Restarts the automatic op names, so that survivors of a reset and a process that joins the
    new world name their unnamed ops alike."""
    with _lock:
        _counters.clear()
