"""Which TensorFlow ringrun.tensorflow's op library was built for, and one status line on it, read
without importing TensorFlow: for ``ringrun check-build``/``doctor`` (which call ``status()``), and
for ``ringrun.tensorflow``'s own import check.

The build writes the version it compiled against beside the library
(``tensorflow/_ringrun_tensorflow.version``); a build where CMake's Python could not import
TensorFlow has neither.
"""

import importlib.metadata
import importlib.util
import os

_PACKAGE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'tensorflow')
LIBRARY = os.path.join(_PACKAGE_DIR, '_ringrun_tensorflow.so')
_VERSION_FILE = os.path.join(_PACKAGE_DIR, '_ringrun_tensorflow.version')


def built_for():
    """The TensorFlow version the op library was compiled against, or None when there is none."""
    try:
        with open(_VERSION_FILE) as f:
            version = f.read().strip()
    except OSError:
        return None
    return version if version and os.path.exists(LIBRARY) else None


def installed():
    """The version of the TensorFlow this Python would import, or None (without importing it)."""
    if importlib.util.find_spec('tensorflow') is None:
        return None
    for dist in importlib.metadata.packages_distributions().get('tensorflow', []):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return 'unknown'


def mismatch(built, found):
    """The one-line reason ringrun.tensorflow cannot load here, or None when it can."""
    if built is None:
        return ('this ringrun build has no TensorFlow op library (its CMake Python could not import tensorflow); '
                'configure ringrun with a Python that has TensorFlow: cmake -S . -B build -DPython_EXECUTABLE=...')
    if found is None:
        return f'TensorFlow is not installed for this Python (the op library was built for TensorFlow {built})'
    if found != built:
        return (f'the op library was built for TensorFlow {built} but this Python has TensorFlow {found}; '
                f'rebuild ringrun (cmake --build build) with this Python, or pip install tensorflow=={built}')
    return None


def status():
    """One line: 'built for TensorFlow X' when it can load here, else what is wrong and the fix."""
    built, found = built_for(), installed()
    problem = mismatch(built, found)
    return f'ringrun.tensorflow: built for TensorFlow {built}' if problem is None else f'ringrun.tensorflow: {problem}'
