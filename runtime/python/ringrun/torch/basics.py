"""Initialisation, the rank queries, reduction ops, dtypes and the handles of pending ops.

The rest of ``ringrun.torch`` builds on these; users import them from ``ringrun.torch``.
"""

import atexit
import itertools
import threading

import torch

from ringrun import _ringrun

InternalError = _ringrun.InternalError
InternalError.__doc__ = (
    "A collective failed because of another rank or the job: a mismatch across ranks (size, dtype, "
    "name), a dead peer, a stall past --stall-check-shutdown-time-seconds. Raised on every rank. "
    "A RuntimeError; also exported as HorovodInternalError.")
HorovodInternalError = InternalError


class HostsUpdatedInterrupt(RuntimeError):
    """Raised on every rank by an elastic State's commit() (check_host_updates) when the world is
    about to change: processes were added, removed, or one asked to leave (SIGTERM).

    ``skip_sync``: True when the next world only loses processes, so the members' committed state
    is already equal and ``ringrun.torch.elastic.run`` does not broadcast it again.
    """

    def __init__(self, skip_sync=False):
        super().__init__("the hosts of the elastic job changed: re-forming the world")
        self.skip_sync = skip_sync


# Reduction ops, as horovod.torch names them. Average divides the sum by size() (integer division
# on integer dtypes).
Sum = _ringrun.SUM
Average = _ringrun.AVERAGE
Min = _ringrun.MIN
Max = _ringrun.MAX
Product = _ringrun.PRODUCT
Adasum = _ringrun.ADASUM  # whole-tensor, allreduce only (ringrun/torch/adasum.py)

_OP_NAMES = {Sum: "Sum", Average: "Average", Min: "Min", Max: "Max", Product: "Product", Adasum: "Adasum"}
# The calls that take op=Adasum, as in Horovod (its reducescatter refuses it).
_ADASUM_CALLS = frozenset({"allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "grouped_allreduce_async",
                           "grouped_allreduce_async_"})

_DTYPES = {
    torch.float32: _ringrun.FLOAT32,
    torch.float64: _ringrun.FLOAT64,
    torch.float16: _ringrun.FLOAT16,
    torch.bfloat16: _ringrun.BFLOAT16,
    torch.int32: _ringrun.INT32,
    torch.int64: _ringrun.INT64,
    torch.uint8: _ringrun.UINT8,
}


class _GlobalProcessSet:
    """All ranks: the only process set ringrun has."""

    process_set_id = 0

    def __repr__(self):
        return "global_process_set"


global_process_set = _GlobalProcessSet()


def init(comm=None, process_sets=None):
    """Joins this process to the job that ``ringrun`` started (rendezvous with every rank).

    Safe to call again. ``comm`` (an MPI communicator) and ``process_sets`` are Horovod options
    that ringrun does not have: passing them raises NotImplementedError.
    """
    if comm is not None:
        raise NotImplementedError("ringrun.torch.init(comm=...): ringrun does not run over an MPI communicator; "
                                  "start the program with ringrun and call init() without arguments")
    if process_sets not in (None, [], ()):
        raise NotImplementedError("ringrun.torch.init(process_sets=...): process sets are not supported; "
                                  "every collective runs over all ranks")
    _ringrun.init()
    _register_shutdown()


def shutdown():
    """Stops the runtime: pending async ops fail, the connections close. Collective; at exit too."""
    with _lock:
        _pending.clear()
    if _ringrun.is_initialized():
        _ringrun.finalize()


def is_initialized():
    """True between init() and shutdown()."""
    return _ringrun.is_initialized()


def size():
    """The number of ranks in the job."""
    return _ringrun.size()


def rank():
    """This process's rank, 0 .. size() - 1."""
    return _ringrun.rank()


def local_size():
    """The number of ranks on this host."""
    return _ringrun.local_size()


def local_rank():
    """This process's index among the ranks of its host: the GPU to use (torch.cuda.set_device)."""
    return _ringrun.local_rank()


def cross_size():
    """The number of ranks with this process's local rank (one per host on a uniform job)."""
    return _ringrun.cross_size()


def cross_rank():
    """This process's rank among the ranks with its local rank."""
    return _ringrun.cross_rank()


def is_homogeneous():
    """True when every host runs the same number of ranks."""
    return size() == local_size() * cross_size()


def nccl_built():
    """True when this build reduces CUDA tensors with NCCL."""
    return bool(_ringrun.NCCL_BUILT)


def cuda_built():
    """True when this build handles CUDA tensors (through NCCL)."""
    return nccl_built()


def rocm_built():
    """Always False: ringrun has no ROCm build."""
    return False


def mpi_built():
    """False: ringrun's runtime does not use MPI (it runs MPI programs, but talks TCP and shared memory)."""
    return False


def mpi_enabled():
    """False: see mpi_built()."""
    return False


def gloo_built():
    """False: ringrun's runtime has its own TCP and shared-memory transports, not Gloo."""
    return False


def gloo_enabled():
    """False: see gloo_built()."""
    return False


def mpi_threads_supported():
    """False: see mpi_built()."""
    return False


_shutdown_registered = False


def _register_shutdown():
    global _shutdown_registered
    if not _shutdown_registered:
        _shutdown_registered = True
        atexit.register(_shutdown_at_exit)


def _shutdown_at_exit():
    try:
        shutdown()
    except Exception:  # noqa: BLE001 - a peer that died first must not turn a clean exit into a traceback
        pass


def _op_code(op, average, what):
    """The C op of Horovod's (op, average) pair: op=None means Average."""
    if average is not None:
        if op is not None:
            raise ValueError(f"{what}: give either op or the deprecated average, not both")
        return Average if average else Sum
    if op is None:
        return Average
    if op == Adasum and what not in _ADASUM_CALLS:
        raise NotImplementedError(f"{what}: op=Adasum is an allreduce op only (as in Horovod); use Average or Sum")
    if op not in _OP_NAMES:
        raise ValueError(f"{what}: unknown op {op!r}; use Average, Sum, Min, Max or Product")
    return op


def _check_process_set(process_set, what):
    if process_set is not None and process_set is not global_process_set:
        raise NotImplementedError(f"{what}: process sets are not supported; every collective runs over all ranks")


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
