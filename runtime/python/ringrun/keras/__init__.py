"""ringrun.keras: horovod.keras for Keras 3, on the TensorFlow backend; the same API as
ringrun.tensorflow.keras, and ``Adasum`` as horovod.keras has it (``import ringrun.keras as hvd``)."""

from ringrun.tensorflow.keras import *  # noqa: F401,F403
from ringrun.tensorflow.keras import __all__ as _tensorflow_keras_all
from ringrun.tensorflow.mpi_ops import Adasum  # noqa: F401
from ringrun.keras import callbacks, elastic  # noqa: F401,E402

__all__ = sorted(_tensorflow_keras_all + ['Adasum'])
