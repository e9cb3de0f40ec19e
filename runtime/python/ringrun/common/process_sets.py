"""horovod.common.process_sets' names, for programs that import them from there; the process
sets themselves are ringrun.process_sets."""

from ringrun.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set  # noqa: F401

__all__ = ['ProcessSet', 'add_process_set', 'global_process_set', 'remove_process_set']
