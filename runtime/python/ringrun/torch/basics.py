"""The torch side of the basics: dtypes, the checks a tensor passes, and the handles of pending
ops (poll, synchronize). Initialisation, the queries, ops, errors and process sets are
``ringrun.common.basics``'s; users import all of them from ``ringrun.torch``.
"""

import itertools
import threading

import torch

from ringrun import _ringrun
from ringrun.common import basics as _common
from ringrun.common.basics import (  # noqa: F401 - ringrun.torch's names
    Adasum, Average, HorovodInternalError, HostsUpdatedInterrupt, InternalError, Max, Min, Product, ProcessSet, Sum,
    _ADASUM_CALLS, _OP_NAMES, _op_code, _set_id, _set_rank, _set_size, add_process_set, ccl_built, cross_rank,
    cross_size, cuda_built, ddl_built, global_process_set, gloo_built, gloo_enabled, is_homogeneous, is_initialized,
    local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, nccl_status, rank,
    remove_process_set, rocm_built, shutdown, size, start_timeline, stop_timeline)
from ringrun.torch.version import check_torch_version

# Public: ringrun.torch and ringrun.torch.mpi_ops export these (mpi_ops.__all__).
__all__ = ['Adasum', 'Average', 'HorovodInternalError', 'HostsUpdatedInterrupt', 'InternalError', 'Max', 'Min', 'Product',
           'ProcessSet', 'Sum', 'add_process_set', 'ccl_built', 'cross_rank', 'cross_size', 'cuda_built', 'ddl_built',
           'global_process_set', 'gloo_built', 'gloo_enabled', 'init', 'is_homogeneous', 'is_initialized',
           'local_rank', 'local_size', 'mpi_built', 'mpi_enabled', 'mpi_threads_supported', 'nccl_built', 'poll',
           'rank', 'remove_process_set', 'rocm_built', 'shutdown', 'size', 'start_timeline', 'stop_timeline',
           'synchronize']

check_torch_version(torch.__version__)

_DTYPES = {
    torch.float32: _ringrun.FLOAT32,
    torch.float64: _ringrun.FLOAT64,
    torch.float16: _ringrun.FLOAT16,
    torch.bfloat16: _ringrun.BFLOAT16,
    torch.int32: _ringrun.INT32,
    torch.int64: _ringrun.INT64,
    torch.uint8: _ringrun.UINT8,
    torch.int8: _ringrun.INT8,
    torch.int16: _ringrun.INT16,
    torch.bool: _ringrun.BOOL,
}


def init(comm=None, process_sets=None):
    """Joins this process to the job that ``ringrun`` started (rendezvous with every rank).

    ``process_sets``: ProcessSet objects (or lists of global ranks) to register at once, in the
    same order on every rank, as ``add_process_set`` would; ``"dynamic"`` (Horovod's switch for
    adding sets later) is accepted and changes nothing, as sets can always be added. Safe to call
    again. ``comm`` (an MPI communicator) is Horovod's option for running inside an MPI program:
    ringrun has no MPI controller, so it raises NotImplementedError.
    """
    _common._init(comm, process_sets, "ringrun.torch")


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
        version, reason = nccl_status()
        if not version:
            raise ValueError(f"{what}: the tensor is on {tensor.device} but {reason}")
        # The runtime reads the tensor on its own stream: work queued on torch's stream must be done.
        torch.cuda.current_stream(tensor.device).synchronize()
    elif tensor.device.type != "cpu":
        raise ValueError(f"{what}: tensors on {tensor.device} are not supported; use CPU or CUDA tensors")
    return _dtype_code(tensor, what)


# Guards the pending ops (and submission's automatic names).
_lock = threading.Lock()


class _Pending:
    """One submitted op: its C handles not yet waited for, the tensors and outputs they use, and
    what completes the result."""

    __slots__ = ("handles", "keep", "finish")

    def __init__(self, handles, keep, finish):
        self.handles = list(handles)
        self.keep = keep
        self.finish = finish


_pending = {}
_next_handle = itertools.count(1)


def _add_pending(handles, keep, finish):
    handle = next(_next_handle)
    with _lock:
        _pending[handle] = _Pending(handles, keep, finish)
    return handle


def _add_group(submit_parts, finish):
    """One handle for a group of ops: submit_parts() yields (C handle, kept) per part. When a part
    fails to submit, the parts already queued stay pending (their buffers alive, waited at
    shutdown) and the error propagates."""
    handles, keeps = [], []
    try:
        for handle, keep in submit_parts():
            handles.append(handle)
            keeps.append(keep)
    except BaseException:
        if handles:
            _add_pending(handles, keeps, lambda: None)
        raise
    return _add_pending(handles, keeps, finish)


def poll(handle):
    """True when the op behind the handle has completed; synchronize() then returns at once."""
    with _lock:
        pending = _pending.get(handle)
    if pending is None:
        raise ValueError(f"poll: handle {handle} is unknown or already synchronized")
    return all(_ringrun.test(h) for h in pending.handles)


def _wait_all(pending):
    """Waits for every C handle of an op, releasing each; the first error is raised once all are
    done. A KeyboardInterrupt (or another signal handler's exception) leaves the handles not yet
    done in place, so the op can be synchronized again or dropped at shutdown."""
    error = None
    while pending.handles:
        try:
            _ringrun.wait(pending.handles[0])
        except (ValueError, RuntimeError) as e:  # the op's error: the handle is released
            error = error or e
        pending.handles.pop(0)
    if error is not None:
        raise error


def synchronize(handle):
    """Waits for the op behind the handle and returns its output tensor(s).

    Raises InternalError when the op failed (on every rank); returns None for a handle that is
    unknown or synchronized already, as Horovod does. Ctrl-C interrupts the wait
    (KeyboardInterrupt) within a tenth of a second; the op stays pending.
    """
    with _lock:
        pending = _pending.get(handle)
    if pending is None:
        return None
    try:
        _wait_all(pending)
    except (ValueError, RuntimeError):
        with _lock:
            _pending.pop(handle, None)
        raise
    with _lock:
        _pending.pop(handle, None)
    return pending.finish()


def _completed(value):
    """A handle whose op already ran (synchronously); synchronize() returns value."""
    return _add_pending((), None, lambda: value)


def _drop_pending():
    """Waits for (and releases) every pending op's C handles, ignoring their errors: before an
    elastic reset and after shutdown, whose failed ops the caller will never synchronize."""
    with _lock:
        pending = list(_pending.values())
        _pending.clear()
    for p in pending:
        try:
            _wait_all(p)
        except Exception:  # noqa: BLE001 - the op belonged to the world being left
            pass


# After shutdown every pending op has failed and no engine writes into its outputs: release them.
_common._after_shutdown.append(_drop_pending)
