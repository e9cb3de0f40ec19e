"""What every framework binding shares: initialisation, the rank queries, the build queries, the
reduction ops, the errors and the (single) process set. Imports no framework.

``ringrun.torch`` and ``ringrun.tensorflow`` re-export these under Horovod's names.
"""

import atexit

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
    is already equal and ``elastic.run`` does not broadcast it again.
    """

    def __init__(self, skip_sync=False):
        super().__init__("the hosts of the elastic job changed: re-forming the world")
        self.skip_sync = skip_sync


# Reduction ops, as Horovod names them. Average divides the sum by size() (integer division on
# integer dtypes).
Sum = _ringrun.SUM
Average = _ringrun.AVERAGE
Min = _ringrun.MIN
Max = _ringrun.MAX
Product = _ringrun.PRODUCT
Adasum = -1  # accepted as a name so that scripts import; refused when used

_OP_NAMES = {Sum: "Sum", Average: "Average", Min: "Min", Max: "Max", Product: "Product"}


class _GlobalProcessSet:
    """All ranks: the only process set ringrun has."""

    process_set_id = 0

    def __repr__(self):
        return "global_process_set"


global_process_set = _GlobalProcessSet()


def _init(comm, process_sets, who):
    """init() of the binding named ``who``: refuses Horovod's options ringrun does not have."""
    if comm is not None:
        raise NotImplementedError(f"{who}.init(comm=...): ringrun does not run over an MPI communicator; "
                                  "start the program with ringrun and call init() without arguments")
    if process_sets not in (None, [], ()):
        raise NotImplementedError(f"{who}.init(process_sets=...): process sets are not supported yet (they wait "
                                  "for ringrun's engine); every collective runs over all ranks")
    _ringrun.init()
    _register_shutdown()


# Run by shutdown() before the runtime stops: each binding forgets what it still tracks.
_before_shutdown = []


def shutdown():
    """Stops the runtime: pending async ops fail, the connections close. Collective; at exit too."""
    for forget in _before_shutdown:
        forget()
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
    if op == Adasum:
        raise NotImplementedError(f"{what}: op=Adasum is not supported by ringrun; use Average or Sum")
    if op not in _OP_NAMES:
        raise ValueError(f"{what}: unknown op {op!r}; use Average, Sum, Min, Max or Product")
    return op


def _check_process_set(process_set, what):
    if process_set is not None and process_set is not global_process_set:
        raise NotImplementedError(f"{what}: process sets other than global_process_set are not supported yet "
                                  "(they wait for ringrun's engine); every collective runs over all ranks")


class ProcessSet:
    """Horovod's subset of ranks for collectives. Waits for ringrun's engine: constructing one is
    allowed (so that scripts import and build their sets), using it raises NotImplementedError."""

    def __init__(self, ranks_or_comm=None):
        self.ranks = ranks_or_comm
        self.process_set_id = None

    def __repr__(self):
        return f"ProcessSet(ranks={self.ranks!r})"


def add_process_set(process_set):
    """Raises NotImplementedError: process sets wait for ringrun's engine."""
    _check_process_set(process_set, "add_process_set")


def remove_process_set(process_set):
    """Raises NotImplementedError: process sets wait for ringrun's engine."""
    _check_process_set(process_set, "remove_process_set")
