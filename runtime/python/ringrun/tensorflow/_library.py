"""Loads ringrun.tensorflow's op library (_ringrun_tensorflow.so) into TensorFlow, or raises one
ImportError line naming the TensorFlow it was built for, the one found, and the fix."""

import tensorflow as tf

from ringrun import tensorflow_build


def load():
    """The loaded op library: its ops as Python functions (ringrun_allreduce, ...)."""
    built = tensorflow_build.built_for()
    problem = tensorflow_build.mismatch(built, tf.__version__ if built is not None else None)
    if problem is not None:
        raise ImportError(f'ringrun.tensorflow: {problem}')
    try:
        return tf.load_op_library(tensorflow_build.LIBRARY)
    except (tf.errors.NotFoundError, OSError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ImportError(f'ringrun.tensorflow: the op library built for TensorFlow {built} does not load into '
                          f'TensorFlow {tf.__version__} ({first}); rebuild ringrun (cmake --build build) with this '
                          'Python') from None
