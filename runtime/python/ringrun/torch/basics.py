"""Initialisation, the rank queries, reduction ops, dtypes and the handles of pending ops.

The rest of ``ringrun.torch`` builds on these; users import them from ``ringrun.torch``.
"""

import atexit
import itertools
import threading

import torch

from ringrun import _ringrun
from ringrun import process_sets as _process_sets
from ringrun.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set  # noqa: F401
from ringrun.torch.version import check_torch_version

check_torch_version(torch.__version__)

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


# Reduction ops, as horovod.torch names them. Average divides the sum by the number of ranks of the
# op's process set (integer division on integer dtypes).
Sum = _ringrun.SUM
Average = _ringrun.AVERAGE
Min = _ringrun.MIN
Max = _ringrun.MAX
Product = _ringrun.PRODUCT
Adasum = _ringrun.ADASUM  # whole-tensor, allreduce only (ringrun/torch/adasum.py)

_OP_NAMES = {Sum: "Sum", Average: "Average", Min: "Min", Max: "Max", Product: "Product", Adasum: "Adasum"}
# The calls that take op=Adasum, as in Horovod (its reducescatter refuses it).
_ADASUM_CALLS = frozenset({"allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "grouped_allreduce",
                           "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_"})

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
    if comm is not None:
        raise NotImplementedError("ringrun.torch.init(comm=...): ringrun does not run over an MPI communicator; "
                                  "start the program with ringrun and use process_sets= for subsets of ranks")
    first = not _ringrun.is_initialized()
    _ringrun.init()
    _register_shutdown()
    if first:
        _process_sets._init_process_sets(None if isinstance(process_sets, str) else process_sets)


def shutdown():
    """Stops the runtime: pending async ops fail, the connections close. Collective; at exit too."""
    try:
        if _ringrun.is_initialized():
            _ringrun.finalize()
    finally:
        _drop_pending()  # after the engine stopped: nothing writes into their outputs any more


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
    """The NCCL version this build reduces CUDA tensors with (e.g. 22809 for 2.28.9), or 0 without NCCL."""
    return int(_ringrun.NCCL_VERSION)


def cuda_built():
    """True when this build handles CUDA tensors (through NCCL)."""
    return nccl_built() > 0


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


def ccl_built():
    """False: ringrun has no oneCCL build."""
    return False


def ddl_built():
    """False: ringrun has no IBM DDL build."""
    return False


def mpi_threads_supported():
    """False: see mpi_built()."""
    return False


def start_timeline(file_path, mark_cycles=False):
    """Starts writing the Chrome trace of every op (rank 0 writes it) to ``file_path``, replacing
    any timeline already being written. ``mark_cycles``: mark each negotiation cycle that had work.
    The same as ``ringrun --timeline-filename`` from the start; call it on every rank."""
    if not file_path:
        raise ValueError("start_timeline: file_path is empty")
    _ringrun.start_timeline(str(file_path), bool(mark_cycles))


def stop_timeline():
    """Stops writing the timeline and closes its file (valid JSON). Call it on every rank."""
    _ringrun.stop_timeline()


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


def _set_id(process_set, what):
    """The runtime's id of a process_set argument (0: every rank)."""
    return _process_sets._id_of(process_set, what)


def _set_size(process_set):
    return size() if process_set is None or process_set is global_process_set else process_set.size()


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
