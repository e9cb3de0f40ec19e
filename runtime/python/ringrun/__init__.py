"""ringrun's runtime for Python.

The framework binding is ``ringrun.torch`` (Horovod's ``horovod.torch`` API): a script migrates by
changing ``import horovod.torch as hvd`` to ``import ringrun.torch as hvd`` and runs under
``ringrun -np N python3 train.py``. This package itself does not import torch.

``ringrun.run(func, num_proc=4)`` is Horovod's ``horovod.run``: it starts the job from Python and
returns what ``func`` returned on each rank (``ringrun.runner``).
"""

__version__ = "0.1.0"


def __getattr__(name):
    # ringrun.run is loaded on first use: every rank imports this package, few need the launcher.
    if name == "run":
        from ringrun.runner import run
        return run
    raise AttributeError(f"module 'ringrun' has no attribute {name!r}")
