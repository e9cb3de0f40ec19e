"""horovod.common.exceptions' names, for programs that import them from there: the errors of
ringrun's collectives (``HorovodInternalError``) and of an elastic world that changed
(``HostsUpdatedInterrupt``), defined in ringrun.common.basics."""

from ringrun.common.basics import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401

__all__ = ['HorovodInternalError', 'HostsUpdatedInterrupt']
