# ringrun-test: np=1 direct timeout=400
"""ringrun.tensorflow where no op library was built for its TensorFlow (``pip install .``, whose
build environment has no TensorFlow; or a TensorFlow other than the wheel's): the first import
compiles one into the cache from the sources the package carries, once, while other processes
importing at the same time wait for it, and it then reduces; a later import loads it with nothing
compiled. The package here is a copy of the build tree's without its op library, with the sources
beside it as pip installs them (cmake/layout.cmake)."""
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
BUILD = os.path.dirname(os.path.dirname(os.path.abspath(os.environ["RINGRUN"])))

PROGRAM = """
import tensorflow as tf
import ringrun.tensorflow as hvd
hvd.init()
total = hvd.allreduce(tf.constant([1.0, 2.0, 3.0]), op=hvd.Sum)
assert total.numpy().tolist() == [1.0, 2.0, 3.0], total
print("REDUCED", hvd.size())
"""


def make_package(root):
    """root/python/ringrun: the build tree's package minus its op library, plus the sources;
    root/lib: the build tree's runtime library (the package finds it two folders up)."""
    package = os.path.join(root, "python", "ringrun")
    shutil.copytree(os.path.join(BUILD, "python", "ringrun"), package,
                    ignore=shutil.ignore_patterns("_ringrun_tensorflow.*", "__pycache__"))
    sources = os.path.join(package, "tensorflow", "src")
    os.makedirs(os.path.join(sources, "ringrun"))
    tensorflow_sources = os.path.join(SOURCE, "runtime", "python", "tensorflow")
    for name in os.listdir(tensorflow_sources):
        if name.endswith((".cpp", ".hpp")):
            shutil.copy(os.path.join(tensorflow_sources, name), sources)
    shutil.copy(os.path.join(SOURCE, "runtime", "include", "ringrun", "ringrun.h"), os.path.join(sources, "ringrun"))
    os.symlink(os.path.join(BUILD, "lib"), os.path.join(root, "lib"))
    return os.path.join(root, "python")


def main():
    with tempfile.TemporaryDirectory(prefix="ringrun-tf-first-import-") as root:
        env = dict(os.environ, PYTHONPATH=make_package(root), RINGRUN_CACHE_DIR=os.path.join(root, "cache"),
                   TF_CPP_MIN_LOG_LEVEL="2")
        for name in ("RINGRUN_RANK", "RINGRUN_SIZE", "MASTER_ADDR"):
            env.pop(name, None)
        status = subprocess.run([sys.executable, "-c", "from ringrun import tensorflow_build as b; print(b.status())"],
                                env=env, capture_output=True, text=True, timeout=60)
        assert "on first import" in status.stdout, status.stdout + status.stderr
        # Two processes import at once: one compiles, the other waits for it; both reduce.
        first = [subprocess.Popen([sys.executable, "-c", PROGRAM], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
        outputs = [p.communicate(timeout=380) for p in first]
        for p, (out, err) in zip(first, outputs):
            assert p.returncode == 0 and "REDUCED 1" in out, (p.returncode, out, err[-3000:])
        said = sum(err.count("ringrun.tensorflow: compiling the op library for TensorFlow") for _, err in outputs)
        assert said == 1, [err[-2000:] for _, err in outputs]
        compiled = [d for d in os.listdir(os.path.join(root, "cache")) if d.startswith("tensorflow-")]
        assert len(compiled) == 1, compiled
        # Once compiled, it is loaded, and nothing is compiled again.
        again = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=120)
        assert again.returncode == 0 and "REDUCED 1" in again.stdout, again.stderr[-3000:]
        assert "compiling" not in again.stderr, again.stderr[-2000:]
        status = subprocess.run([sys.executable, "-c", "from ringrun import tensorflow_build as b; print(b.status())"],
                                env=env, capture_output=True, text=True, timeout=60)
        assert "compiled for TensorFlow" in status.stdout and compiled[0] in status.stdout, status.stdout
        # A compile that fails stops the others at once: one line with the compiler's error, and no
        # compiler process left running (the planted compiler fails on the first file, sleeps on the rest).
        planted = os.path.join(root, "planted-c++")
        with open(planted, "w") as f:
            f.write('#!/bin/sh\ncase "$*" in *engine_ops.cpp*) echo "error: planted failure" >&2; exit 1;; esac\n'
                    'exec sleep 77.5\n')
        os.chmod(planted, 0o755)
        broken = dict(env, CXX=planted, RINGRUN_CACHE_DIR=os.path.join(root, "cache3"))
        started = time.monotonic()
        failed = subprocess.run([sys.executable, "-c", PROGRAM], env=broken, capture_output=True, text=True, timeout=60)
        last = failed.stderr.strip().splitlines()[-1]
        assert failed.returncode != 0 and "compiling it failed: error: planted failure" in last, last
        assert time.monotonic() - started < 40, time.monotonic() - started
        left = subprocess.run(["pgrep", "-f", "sleep 77.5"], capture_output=True, text=True)
        assert left.stdout.strip() == "", "compilers left running: " + left.stdout
        # Without a compiler: one line naming what is missing and the fix (in a fresh cache).
        bare = dict(env, CXX="/nonexistent/c++", RINGRUN_CACHE_DIR=os.path.join(root, "cache2"))
        failed = subprocess.run([sys.executable, "-c", PROGRAM], env=bare, capture_output=True, text=True, timeout=120)
        assert failed.returncode != 0, failed.stdout
        last = failed.stderr.strip().splitlines()[-1]
        assert last.startswith("ImportError: ringrun.tensorflow: no op library for TensorFlow") and \
            "no C++ compiler" in last and "install g++" in last, last
        print("ok: compiled once on first import (", outputs[0][1].strip().splitlines()[-1:], "), loaded after;",
              "without a compiler:", last)


if __name__ == "__main__":
    main()
