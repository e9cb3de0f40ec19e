"""ringrun.tensorflow's op library: which one this Python loads, and building one for its TensorFlow.

TensorFlow's C++ ABI changes between releases, so the op library must be compiled against the
TensorFlow that loads it. Where it comes from (README, "TensorFlow and Keras"), first found:

1. the one built with ringrun (``tensorflow/_ringrun_tensorflow.so``), when it was built for this
   TensorFlow: the CMake build and the binary wheel (for the TensorFlow it was built with) have it;
2. one compiled earlier for this TensorFlow and this ringrun install, in the cache
   (``RINGRUN_CACHE_DIR``, else ``$XDG_CACHE_HOME/ringrun``, else ``~/.cache/ringrun``);
3. compiled now, on first import, from the sources the package carries, with the C++ compiler
   (``CXX``, else ``c++``) against this TensorFlow's headers, as torch's cpp_extension does: once
   per TensorFlow version, about half a minute; ranks importing at once wait for the first.

``status()`` says which, for ``ringrun check-build``, without importing TensorFlow.
"""

import fcntl
import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_TENSORFLOW_DIR = os.path.join(_PACKAGE_DIR, 'tensorflow')
LIBRARY = os.path.join(_TENSORFLOW_DIR, '_ringrun_tensorflow.so')
_VERSION_FILE = os.path.join(_TENSORFLOW_DIR, '_ringrun_tensorflow.version')
# The op library's sources and ringrun/ringrun.h, as installed beside the package (cmake/layout.cmake).
SOURCES_DIR = os.path.join(_TENSORFLOW_DIR, 'src')
# The runtime library the op library links: the package's own (pip), or the build tree's.
_RUNTIME_CANDIDATES = (os.path.join(_PACKAGE_DIR, 'lib', 'libringrun_runtime.so.0'),
                       os.path.join(_PACKAGE_DIR, '..', '..', 'lib', 'libringrun_runtime.so.0'))
_BUILD_SECONDS = 600


def built_for():
    """The TensorFlow version the packaged op library was compiled against, or None when there is none."""
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


def _runtime_library():
    for candidate in _RUNTIME_CANDIDATES:
        if os.path.exists(candidate):
            return os.path.realpath(candidate)
    return None


def _sources():
    """The op library's source files the package carries, sorted; empty when it carries none."""
    try:
        names = sorted(os.listdir(SOURCES_DIR))
    except OSError:
        return []
    return [os.path.join(SOURCES_DIR, n) for n in names if n.endswith(('.cpp', '.hpp'))]


def can_compile():
    """Whether this install carries the op library's sources and a runtime library to link it to."""
    return bool(_sources()) and _runtime_library() is not None


def cache_root():
    """The folder compiled op libraries are kept in."""
    from ringrun._ringrun import variables
    given = variables.read(variables.CACHE_DIR)
    if given:
        return given
    base = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
    return os.path.join(base, 'ringrun')


def cached_library(version):
    """Where the op library compiled for TensorFlow `version` and this install is (or would be) kept:
    one per TensorFlow version, Python, ringrun install and source text."""
    digest = hashlib.sha256()
    for path in _sources() + [_runtime_library() or '']:
        digest.update(path.encode())
        if os.path.isfile(path) and path.endswith(('.cpp', '.hpp', '.h')):
            with open(path, 'rb') as f:
                digest.update(f.read())
    key = f'tensorflow-{version}-{sys.implementation.cache_tag}-{digest.hexdigest()[:16]}'
    return os.path.join(cache_root(), key, '_ringrun_tensorflow.so')


def mismatch(built, found):
    """The one-line reason the packaged op library cannot load here, or None when it can."""
    if built is None:
        return ('this ringrun build has no TensorFlow op library (its CMake Python could not import tensorflow); '
                'configure ringrun with a Python that has TensorFlow: cmake -S . -B build -DPython_EXECUTABLE=...')
    if found is None:
        return f'TensorFlow is not installed for this Python (the op library was built for TensorFlow {built})'
    if found != built:
        return (f'the op library was built for TensorFlow {built} but this Python has TensorFlow {found}; '
                f'rebuild ringrun (cmake --build build) with this Python, or pip install tensorflow=={built}')
    return None


def library_for(version):
    """The op library to load for TensorFlow `version`: the packaged one, a cached one, or None
    when one must be compiled (compile_library())."""
    if built_for() == version:
        return LIBRARY
    cached = cached_library(version)
    return cached if os.path.exists(cached) else None


def compile_library(tf, log=None):
    """Compiles the op library for the imported TensorFlow module `tf` into the cache and returns its
    path; ranks that ask at once wait for the first. Raises ImportError in one line naming what
    failed and the fix."""
    version = tf.__version__
    target = cached_library(version)
    sources = [s for s in _sources() if s.endswith('.cpp')]
    runtime = _runtime_library()
    if not sources or runtime is None:
        raise ImportError(_unavailable(version, 'this install carries no op library sources to compile'))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target + '.lock', 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another rank may be compiling it: wait for it
        if os.path.exists(target):
            return target
        if log is not None:
            log(f'ringrun.tensorflow: compiling the op library for TensorFlow {version} into '
                f'{os.path.dirname(target)} (once; about half a minute)')
        _compile_into(tf, sources, runtime, target, version)
    return target


def _compile_into(tf, sources, runtime, target, version):
    compiler = os.environ.get('CXX', 'c++')
    flags = [f for f in tf.sysconfig.get_compile_flags() if not f.startswith('-std=')]
    # The same options as runtime/python/tensorflow/CMakeLists.txt's build of it.
    common = [compiler, '-std=c++17', '-O2', '-fPIC', '-fvisibility=hidden', '-I', SOURCES_DIR] + flags
    workdir = tempfile.mkdtemp(prefix='build-', dir=os.path.dirname(target))
    jobs = []
    try:
        objects = []
        for source in sources:  # the files compile side by side, then link
            obj = os.path.join(workdir, os.path.basename(source) + '.o')
            objects.append(obj)
            jobs.append(_start(common + ['-c', source, '-o', obj], compiler, version))
        for job in jobs:
            _finish(job, version)
        partial = os.path.join(workdir, '_ringrun_tensorflow.so')
        link = ([compiler, '-shared', '-o', partial] + objects + tf.sysconfig.get_link_flags() +
                [runtime, f'-Wl,-rpath,{os.path.dirname(runtime)}'])
        jobs.append(_start(link, compiler, version))
        _finish(jobs[-1], version)
        os.replace(partial, target)  # whole, or not at all
    finally:
        # A failed or interrupted build leaves no compiler running and no partial file: each job is
        # a process group (the compiler driver and the cc1plus it starts).
        for _, process in jobs:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def _start(argv, compiler, version):
    try:
        return argv, subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      start_new_session=True)
    except OSError as e:
        raise ImportError(_unavailable(version, f'no C++ compiler to build it with ({compiler}: {e.strerror}); '
                                                'install g++ (or set CXX)')) from None


def _finish(job, version):
    argv, process = job
    try:
        output, _ = process.communicate(timeout=_BUILD_SECONDS)
    except subprocess.TimeoutExpired:
        raise ImportError(_unavailable(version, f'compiling it took more than {_BUILD_SECONDS} s '
                                                f'({" ".join(argv[:2])} ...)')) from None
    if process.returncode != 0:
        errors = [line for line in output.splitlines() if 'error' in line] or output.strip().splitlines() or ['?']
        raise ImportError(_unavailable(version, f'compiling it failed: {errors[0].strip()} ({" ".join(argv[:2])} ...)'))


def _unavailable(version, why):
    built = built_for()
    instead = f'; or pip install tensorflow=={built}, which this ringrun carries an op library for' if built else ''
    return f'ringrun.tensorflow: no op library for TensorFlow {version} here and {why}{instead}'


def status():
    """One line: which op library this Python would load, or what is wrong and the fix."""
    found = installed()
    if found is None:
        built = built_for()
        return (f'ringrun.tensorflow: TensorFlow is not installed for this Python'
                f'{f" (the op library was built for TensorFlow {built})" if built else ""}')
    if built_for() == found:
        return f'ringrun.tensorflow: built for TensorFlow {found}'
    cached = cached_library(found)
    if os.path.exists(cached):
        return f'ringrun.tensorflow: compiled for TensorFlow {found} ({os.path.dirname(cached)})'
    if _sources():
        return f'ringrun.tensorflow: compiled for TensorFlow {found} on first import (into {cache_root()})'
    return f'ringrun.tensorflow: {mismatch(built_for(), found)}'
