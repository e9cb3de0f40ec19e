# ringrun-test: np=1 direct timeout=120
"""NCCL and the CUDA runtime found when a job runs, on a host without a GPU (README, "On a GPU
cluster"): with no NCCL anywhere, nccl_built() is 0 and a CUDA tensor is refused in one line that
names what is missing and how to get it; with PyPI's nvidia-nccl-cu13 named (this Python's, where
installed), nccl_built() is its version and `ringrun check-build` shows the library, its path and
"no CUDA device" as the reason the GPU cannot be used here. A CPU-only program loads nothing from
CUDA: training on CPU tensors is every other test's business."""
import importlib.util
import os
import subprocess
import sys

import torch

RINGRUN = os.environ["RINGRUN"]
# The build tree's package, as ringrun puts it on its ranks' PYTHONPATH.
PACKAGE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(RINGRUN))), "python")
# Nothing of the caller's may point the search at an NCCL: these tests set what they need.
BASE_ENV = {k: v for k, v in os.environ.items()
            if k not in ("RINGRUN_NCCL_LIBRARY", "RINGRUN_CUDART_LIBRARY", "NCCL_HOME", "CUDA_HOME", "VIRTUAL_ENV",
                         "CONDA_PREFIX", "LD_LIBRARY_PATH")}
BASE_ENV["PYTHONPATH"] = os.pathsep.join([PACKAGE_DIR, os.path.dirname(os.path.abspath(__file__))])


class CudaStandIn(torch.Tensor):
    """A CPU tensor that says it is on cuda:0, as a CUDA tensor would: this host has no device to
    make a real one, and ringrun.torch decides by tensor.device before anything touches memory."""

    @property
    def device(self):
        return torch.device("cuda", 0)


def run_python(code, env):
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


def pypi_nccl():
    """This Python's nvidia-nccl-cu13 library, or None where it is not installed."""
    try:
        spec = importlib.util.find_spec("nvidia.nccl")
    except ModuleNotFoundError:  # no nvidia package at all
        spec = None
    for folder in (spec.submodule_search_locations if spec else []):
        path = os.path.join(folder, "lib", "libnccl.so.2")
        if os.path.exists(path):
            return path
    return None


def check_without_nccl():
    # The search ends at /usr/local/cuda and the system's path: nothing there on this host.
    env = dict(BASE_ENV, RINGRUN_NCCL_LIBRARY="")
    code = ("import torch, ringrun.torch as hvd\n"
            "from test_gpu_libraries import CudaStandIn\n"
            "assert hvd.nccl_built() == 0 and not hvd.cuda_built(), hvd.nccl_built()\n"
            "t = torch.ones(4).as_subclass(CudaStandIn)\n"
            "try:\n"
            "    hvd.allreduce(t, name='x')\n"
            "except ValueError as e:\n"
            "    print('REFUSED', e)\n")
    result = run_python(code, env)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("REFUSED")]
    assert len(lines) == 1 and len(result.stdout.strip().splitlines()) == 1, result.stdout
    message = lines[0]
    for words in ("on cuda:0", "libnccl.so.2 not found", "pip install nvidia-nccl-cu13", "RINGRUN_NCCL_LIBRARY"):
        assert words in message, (words, message)
    print("without NCCL:", message)


def check_cpu_loads_nothing(library):
    """CPU training next to an NCCL it could find loads nothing from CUDA: no NCCL, no CUDA runtime."""
    env = dict(BASE_ENV, RINGRUN_NCCL_LIBRARY=library or "")
    code = ("import torch, ringrun.torch as hvd\n"
            "hvd.init()\n"
            "model = torch.nn.Linear(4, 2)\n"
            "opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),\n"
            "                               named_parameters=model.named_parameters())\n"
            "model(torch.ones(8, 4)).sum().backward(); opt.step()\n"
            "maps = open('/proc/self/maps').read()\n"
            "print('LOADED', [n for n in ('libnccl', 'libcudart', 'libcuda.so') if n in maps])\n")
    result = run_python(code, env)
    assert result.returncode == 0, result.stderr
    assert "LOADED []" in result.stdout, result.stdout
    print("CPU training: nothing of CUDA loaded")


def check_named_library(library):
    env = dict(BASE_ENV, RINGRUN_NCCL_LIBRARY=library)
    result = run_python("import ringrun.torch as hvd; print(hvd.nccl_built())", env)
    assert result.returncode == 0, result.stderr
    version = int(result.stdout.strip())
    assert version >= 21400, version  # 2.14 and later: major*10000 + minor*100 + patch
    text = f"{version // 10000}.{version % 10000 // 100}.{version % 100}"
    # A bad name fails in one line naming the variable, and does not fall back to another NCCL.
    bad = run_python("from ringrun.common.basics import nccl_status; print(nccl_status())",
                     dict(env, RINGRUN_NCCL_LIBRARY=library + ".missing"))
    assert "RINGRUN_NCCL_LIBRARY=" in bad.stdout and "(0," in bad.stdout, bad.stdout + bad.stderr
    # check-build names the library, where it was found, and why the GPU cannot be used here.
    report = subprocess.run([RINGRUN, "check-build"], env=env, capture_output=True, text=True, timeout=60)
    assert report.returncode == 0, report.stderr
    nccl_line = next(line for line in report.stdout.splitlines() if "NCCL" in line and "[" in line)
    assert f"[X] NCCL {text} ({os.path.realpath(library)}" in nccl_line or f"[X] NCCL {text} ({library}" in nccl_line, \
        nccl_line
    assert "from RINGRUN_NCCL_LIBRARY" in nccl_line, nccl_line
    devices = next(line for line in report.stdout.splitlines() if "CUDA devices" in line)
    assert "[ ]" in devices and "no CUDA device" in devices, devices
    print(f"with {library}: nccl_built() = {version}; check-build:\n{nccl_line}\n{devices}")


def main():
    check_without_nccl()
    library = pypi_nccl()
    check_cpu_loads_nothing(library)
    if library is None:
        print("this Python has no nvidia-nccl-cu13: the found-library half is checked where it has")
    else:
        check_named_library(library)
    print("ok")


if __name__ == "__main__":
    main()
