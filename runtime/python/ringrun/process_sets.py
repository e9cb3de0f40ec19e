"""Process sets: subsets of the ranks that run collectives among themselves (Horovod's API).

Every collective of a framework binding takes ``process_set=`` (default: ``global_process_set``,
every rank). A process set has its own communicator and engine, so its ops negotiate, fuse and
fail among its members only, while other sets' ops run meanwhile::

    even = hvd.add_process_set([0, 2])          # every rank calls it, with the same ranks
    if even.included():
        hvd.allreduce(t, process_set=even)
    hvd.remove_process_set(even)                # every rank calls it

or statically, ``hvd.init(process_sets=[hvd.ProcessSet([0, 2]), hvd.ProcessSet([1, 3])])``.
Collective ranks (``broadcast``'s ``root_rank``) stay global ranks, as in Horovod. This module
imports no framework.
"""

from ringrun import _ringrun


class ProcessSet:
    """A set of ranks that run collectives together.

    Build it from a list of global ranks, then pass it to ``init(process_sets=[...])`` or to
    ``add_process_set()``; ``process_set_id`` is set once the runtime knows it.
    """

    process_set_id = None
    ranks = None
    mpi_comm = None

    def __init__(self, ranks_or_comm):
        try:
            ranks = sorted(ranks_or_comm)
        except TypeError:
            raise ValueError("ProcessSet: pass a list of global ranks; ringrun has no MPI communicators "
                             f"(got {type(ranks_or_comm).__name__})") from None
        if any(not isinstance(r, int) or isinstance(r, bool) for r in ranks):
            raise ValueError(f"ProcessSet: ranks must be integers, got {ranks_or_comm!r}")
        self.ranks = ranks

    def _invalidate(self):
        self.process_set_id = None

    def size(self):
        """The number of ranks in the set, or None before the set is registered."""
        if self.process_set_id is None:
            return None
        return _ringrun.process_set_size(self.process_set_id)

    def rank(self):
        """This process's index within the set (its rank among the set's ranks), or None before
        the set is registered. Ops still name roots by global rank."""
        if self.process_set_id is None:
            return None
        return _ringrun.process_set_rank(self.process_set_id)

    def included(self):
        """Whether this process belongs to the set (None when the ranks are unknown)."""
        if self.ranks is None:
            return None
        return _ringrun.rank() in self.ranks

    def __eq__(self, other):
        if not isinstance(other, ProcessSet):
            return NotImplemented
        return self.process_set_id == other.process_set_id and self.ranks == other.ranks

    def __hash__(self):
        return hash((self.process_set_id, tuple(self.ranks or ())))

    def __str__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"

    __repr__ = __str__


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0

# The registered sets by id, for the ops that only know an id (a TensorFlow op's attribute).
_registered = {}


def _refresh_global():
    """After init: the global set lists every rank."""
    global_process_set.ranks = list(range(_ringrun.size()))


def _init_process_sets(process_sets):
    """Registers init()'s static process sets in order (a collective, like add_process_set)."""
    _refresh_global()
    for ps in process_sets or ():
        if not isinstance(ps, ProcessSet):
            ps = ProcessSet(ps)
        add_process_set(ps)


def add_process_set(process_set):
    """Registers a process set on every rank and returns it.

    Collective over all ranks: every rank calls it, in the same order, with the same ranks. A set
    with the same ranks as an existing one is a ValueError.
    """
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.process_set_id is not None:
        raise ValueError(f"add_process_set: {process_set} is registered already")
    process_set.process_set_id = _ringrun.add_process_set(process_set.ranks)
    _registered[process_set.process_set_id] = process_set
    return process_set


def remove_process_set(process_set):
    """Removes a registered process set on every rank (collective over all ranks); returns
    whether it was removed. The global set cannot be removed."""
    process_set_id = process_set.process_set_id
    if process_set_id is None or process_set_id == 0:
        return False
    process_set._invalidate()
    _registered.pop(process_set_id, None)
    return _ringrun.remove_process_set(process_set_id)


def _by_id(process_set_id):
    """The ProcessSet registered under a runtime id (global_process_set for 0). One this process
    did not register (Horovod's temporary set object) knows its id but not its ranks."""
    if not process_set_id:
        return global_process_set
    if process_set_id in _registered:
        return _registered[process_set_id]
    temporary = ProcessSet([])
    temporary.ranks = None
    temporary.process_set_id = process_set_id
    return temporary


def _id_of(process_set, what):
    """The runtime's id of a process set argument, with a one-line error for one never registered."""
    if process_set is None or process_set is global_process_set:
        return 0
    if not isinstance(process_set, ProcessSet):
        raise ValueError(f"{what}: process_set must be a ProcessSet (hvd.add_process_set), got "
                         f"{type(process_set).__name__}")
    if process_set.process_set_id is None:
        raise ValueError(f"{what}: {process_set} is not registered; pass it to hvd.init(process_sets=...) or "
                         "hvd.add_process_set() first")
    return process_set.process_set_id
