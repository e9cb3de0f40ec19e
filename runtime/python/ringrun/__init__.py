"""ringrun's runtime for Python.

The framework binding is ``ringrun.torch`` (Horovod's ``horovod.torch`` API): a script migrates by
changing ``import horovod.torch as hvd`` to ``import ringrun.torch as hvd`` and runs under
``ringrun -np N python3 train.py``. This package itself does not import torch.
"""

__version__ = "0.1.0"
