"""ringrun.keras: horovod.keras for Keras 3, on the TensorFlow backend; the same API as
ringrun.tensorflow.keras (``import ringrun.keras as hvd``)."""

from ringrun.tensorflow.keras import *  # noqa: F401,F403
from ringrun.tensorflow.keras import __all__  # noqa: F401
from ringrun.keras import callbacks, elastic  # noqa: F401,E402
