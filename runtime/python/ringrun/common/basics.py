"""What every framework binding shares: initialisation, the rank queries, the build queries, the
reduction ops, the errors, process sets and the timeline. Imports no framework.

``ringrun.torch`` and ``ringrun.tensorflow`` re-export these under Horovod's names.
"""

import atexit

from ringrun import _ringrun
from ringrun import process_sets as _process_sets
from ringrun.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set  # noqa: F401

InternalError = _ringrun.InternalError
InternalError.__doc__ = (
    "A collective failed because of another rank or the job: a mismatch across ranks (size, dtype, "
    "shape, name), a dead peer, a stall past --stall-check-shutdown-time-seconds. Raised on every rank. "
    "A RuntimeError; also exported as HorovodInternalError.")
HorovodInternalError = InternalError


class HostsUpdatedInterrupt(RuntimeError):
    """Raised on every rank by an elastic State's commit() (check_host_updates) when the world is
    about to change: processes were added, removed, or one asked to leave (SIGTERM).

    ``skip_sync``: True when the next world only loses processes, so the members' committed state
    is already equal and ``elastic.run`` does not broadcast it again.
    """

    def __init__(self, skip_sync=False):
        super().__init__("the hosts of the elastic job changed: re-forming the world")
        self.skip_sync = skip_sync


# Reduction ops, as Horovod names them. Average divides the sum by the number of ranks of the op's
# process set (integer division on integer dtypes).
Sum = _ringrun.SUM
Average = _ringrun.AVERAGE
Min = _ringrun.MIN
Max = _ringrun.MAX
Product = _ringrun.PRODUCT
Adasum = _ringrun.ADASUM  # whole-tensor, allreduce only (ringrun(3), RINGRUN_ADASUM)

_OP_NAMES = {Sum: "Sum", Average: "Average", Min: "Min", Max: "Max", Product: "Product", Adasum: "Adasum"}
# The calls that take op=Adasum, as in Horovod (its reducescatter refuses it).
_ADASUM_CALLS = frozenset({"allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "grouped_allreduce",
                           "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_"})


def _init(comm, process_sets, who):
    """init() of the binding named ``who``: rendezvous, then the static process sets.

    ``process_sets``: ProcessSet objects (or lists of global ranks) to register at once, in the
    same order on every rank; ``"dynamic"`` (Horovod's switch for adding sets later) changes
    nothing, as sets can always be added. ``comm`` (an MPI communicator) is Horovod's option for
    running inside an MPI program: ringrun has no MPI controller, so it raises NotImplementedError.
    """
    if comm is not None:
        raise NotImplementedError(f"{who}.init(comm=...): ringrun does not run over an MPI communicator; "
                                  "start the program with ringrun and use process_sets= for subsets of ranks")
    first = not _ringrun.is_initialized()
    _ringrun.init()
    _register_shutdown()
    if first:
        _process_sets._init_process_sets(None if isinstance(process_sets, str) else process_sets)


# Run by shutdown() before the runtime stops, and after it (each binding's ops then failed: what it
# still tracks can be released, no engine writes into it any more).
_before_shutdown = []
_after_shutdown = []


def shutdown():
    """Stops the runtime: pending async ops fail, the connections close. Collective; at exit too."""
    for forget in _before_shutdown:
        forget()
    try:
        if _ringrun.is_initialized():
            _ringrun.finalize()
    finally:
        for release in _after_shutdown:
            release()


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
    """This process's index among the ranks of its host: the GPU to use."""
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


_nccl_status = None


def nccl_status():
    """``(version, reason)``: the version code of the NCCL that CUDA tensors are reduced with and an
    empty reason, or ``(0, reason)`` naming what is missing and how to get it. NCCL is loaded the
    first time this is asked (``man ringrun``, RINGRUN_NCCL_LIBRARY: that variable, a copy torch
    already loaded, the environment's ``nvidia/nccl/lib``, ``NCCL_HOME``, ``LD_LIBRARY_PATH``,
    ``/usr/local/cuda``); a CPU-only program that never asks loads nothing from CUDA. The answer
    holds for the process (the runtime loads once), so it is asked once: every CUDA tensor's
    check reads it."""
    global _nccl_status
    if _nccl_status is None:
        code, reason = _ringrun.nccl_status()
        _nccl_status = (int(code), str(reason))
    return _nccl_status


def nccl_built():
    """The version code of the NCCL ringrun reduces CUDA tensors with (e.g. 23203 for 2.32.3), or 0
    when none loads here (``ringrun check-build`` says why). Loads NCCL the first time it is asked."""
    return nccl_status()[0]


def cuda_built():
    """True when CUDA tensors can be reduced here (NCCL loads)."""
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
        raise ValueError(f"{what}: unknown op {op!r}; use Average, Sum, Min, Max, Product or Adasum")
    return op


def _set_id(process_set, what):
    """The runtime's id of a process_set argument (0: every rank)."""
    return _process_sets._id_of(process_set, what)


def _set_of(process_set_id):
    """The ProcessSet of a runtime id (an op's process_set_id attribute): global_process_set for 0."""
    return _process_sets._by_id(process_set_id)


def _root_index(root_rank, process_set, what):
    """The engine's root of a broadcast: the root's index in the process set. Roots are global
    ranks, as in Horovod; the global set's are passed as they are (the engine checks the range)."""
    if process_set is None or process_set is global_process_set:
        return root_rank
    if process_set.ranks is None or root_rank not in process_set.ranks:
        raise ValueError(f"{what}: root_rank {root_rank} is not in {process_set}; pass the global rank of one "
                         "of its members")
    return process_set.ranks.index(root_rank)


def _set_size(process_set):
    return size() if process_set is None or process_set is global_process_set else process_set.size()


def _set_rank(process_set):
    return rank() if process_set is None or process_set is global_process_set else process_set.rank()


def _check_process_set(process_set, what):
    """The runtime's id of a process_set argument, checked (a ProcessSet this process registered)."""
    return _set_id(process_set, what)
