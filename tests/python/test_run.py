# ringrun-test: np=3 timeout=150 direct
"""ringrun.run (Horovod's horovod.run): a function called on every rank, its return values back.

This script is the driver. Checked, with 1 and RINGRUN_TEST_NP ranks:
- Horovod's shape: positional and keyword arguments, a collective inside, one value per rank
  in rank order (None where the function returns None), the ranks' secret not in their
  environment; a function of this script (pickle loads the script on the ranks without its
  `__main__` block; cloudpickle sends it whole) and, with cloudpickle, a closure; without
  cloudpickle a closure is a ValueError naming it.
- A rank that raises: RuntimeError naming the rank and its exception, and the rank still in
  time.sleep(120) stopped by ringrun: well under a minute.
- A return value that cannot be pickled: RuntimeError saying so.
- Values ringrun refuses (mpi_args that set mpirun's binding), and two that exclude each other: ValueError, nothing started.
- Elastic mode (min_num_proc, host_discovery_script): the ranks of the last world.
- SIGINT to the driver alone (a notebook's interrupt): KeyboardInterrupt within seconds, no rank
  left behind.
"""
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The build tree's package, beside the ringrun under test.
sys.path.insert(0, str(Path(os.environ["RINGRUN"]).resolve().parents[1] / "python"))
import ringrun  # noqa: E402

NP = int(os.environ.get("RINGRUN_TEST_NP", "3"))
try:
    import cloudpickle  # noqa: F401
    HAVE_CLOUDPICKLE = True
except ImportError:
    HAVE_CLOUDPICKLE = False


def gather_sum(a, b, c, d):
    import torch

    import ringrun.torch as hvd
    hvd.init()
    rank = hvd.rank()
    res = hvd.allgather(torch.tensor([rank, a + b + c + d])).tolist()
    assert "RINGRUN_RUN_SECRET" not in os.environ, "the secret stays in run_task"
    if rank == 0:
        return res
    return "ret_val_of_rank_1" if rank == 1 else None


def rank_one_raises():
    if os.environ["RINGRUN_RANK"] == "1":
        raise ValueError("boom")
    time.sleep(120)


def unpicklable():
    import threading
    return threading.Lock()


def elastic_ranks():
    import torch

    import ringrun.torch as hvd
    hvd.init()
    state = hvd.elastic.TorchState(epoch=0)

    @hvd.elastic.run
    def loop(state):
        while state.epoch < 3:
            state.epoch += 1
            state.commit()
        return int(hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum).item())

    return hvd.rank(), hvd.size(), loop(state)


def sleeper(folder):
    Path(folder, str(os.getpid())).touch()
    time.sleep(120)


def expect(error, call, needle):
    try:
        call()
    except error as e:
        assert needle in str(e), (needle, str(e))
        return str(e)
    raise AssertionError(f"{call} did not raise {error.__name__}")


def interrupted_driver():
    """SIGINT to this process alone, as a notebook's interrupt sends it."""
    folder = tempfile.mkdtemp(prefix="ringrun-run-test-")
    child = subprocess.Popen([sys.executable, __file__, "--sleeper", folder], start_new_session=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while len(os.listdir(folder)) < NP and time.monotonic() < deadline:
            time.sleep(0.1)
        pids = [int(p) for p in os.listdir(folder)]
        assert len(pids) == NP, ("every rank started", pids)
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=30)
        seconds = time.monotonic() - sent
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    assert "DRIVER INTERRUPTED" in out, out
    assert seconds < 10, (seconds, out)
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists(), (f"rank process {pid} left behind", out)
        os.unlink(os.path.join(folder, str(pid)))
    os.rmdir(folder)
    return seconds


def main():
    started = time.monotonic()
    assert ringrun.run(gather_sum, (1, 20), {"c": 300, "d": 4000}, num_proc=1) == [[0, 4321]]
    expected = [[v for r in range(NP) for v in (r, 4321)], "ret_val_of_rank_1"] + [None] * (NP - 2)
    assert ringrun.run(gather_sum, (1, 20), {"c": 300, "d": 4000}, np=NP) == expected

    offset = 7

    def closure(x):
        return x + offset + int(os.environ["RINGRUN_RANK"])
    if HAVE_CLOUDPICKLE:
        assert ringrun.run(closure, args=(1,), num_proc=NP) == [8 + r for r in range(NP)]
    else:
        expect(ValueError, lambda: ringrun.run(closure, args=(1,), num_proc=NP), "pip install cloudpickle")

    t = time.monotonic()
    message = expect(RuntimeError, lambda: ringrun.run(rank_one_raises, num_proc=NP), "rank 1 raised ValueError: boom")
    assert time.monotonic() - t < 60, ("the sleeping ranks were stopped", message)
    expect(RuntimeError, lambda: ringrun.run(unpicklable, num_proc=NP), "cannot be pickled")

    expect(ValueError, lambda: ringrun.run(gather_sum, num_proc=NP, mpi_args="--bind-to core"), "--bind")
    expect(ValueError, lambda: ringrun.run(gather_sum, hosts="localhost:2", hostfile="hosts"), "not both")

    results = ringrun.run(elastic_ranks, num_proc=NP, min_num_proc=1, max_num_proc=NP,
                          host_discovery_script=f"echo localhost:{NP}")
    assert results == [(r, NP, NP) for r in range(NP)], results

    seconds = interrupted_driver()
    print(f"ringrun.run: {NP} ranks, cloudpickle {HAVE_CLOUDPICKLE}; interrupted in {seconds:.2f} s; "
          f"{time.monotonic() - started:.1f} s in all")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--sleeper"]:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            ringrun.run(sleeper, args=(sys.argv[2],), num_proc=NP)
        except KeyboardInterrupt:
            print("DRIVER INTERRUPTED", flush=True)
        sys.exit(0)
    main()
