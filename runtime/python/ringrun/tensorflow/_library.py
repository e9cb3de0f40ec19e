"""Loads ringrun.tensorflow's op library into TensorFlow: the one built for this TensorFlow, or one
compiled for it now (ringrun.tensorflow_build says where each comes from), or raises one ImportError
line naming what is missing and the fix."""

import sys

import tensorflow as tf

from ringrun import tensorflow_build


def _say(line):
    print(line, file=sys.stderr, flush=True)


def load():
    """The loaded op library: its ops as Python functions (ringrun_allreduce, ...)."""
    version = tf.__version__
    path = tensorflow_build.library_for(version)
    if path is None:
        if not tensorflow_build.can_compile():
            raise ImportError(f'ringrun.tensorflow: {tensorflow_build.mismatch(tensorflow_build.built_for(), version)}')
        path = tensorflow_build.compile_library(tf, log=_say)
    try:
        return tf.load_op_library(path)
    except (tf.errors.NotFoundError, OSError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ImportError(f'ringrun.tensorflow: the op library {path} does not load into TensorFlow {version} '
                          f'({first}); rebuild ringrun (cmake --build build, or pip install again) with this '
                          'Python') from None
