# ringrun-test: np=2,3 timeout=90 direct
"""A SIGKILLed rank makes every other rank raise InternalError within 5 s, naming the dead rank.

This script is the driver: it starts `ringrun -np N` on the worker below (this same file with
--worker) and reads what every rank printed. The survivors ignore the SIGTERM that ringrun sends
once a rank has died, so the test sees their exception rather than their termination.
"""
import os
import re
import signal
import subprocess
import sys
import time


def worker():
    import torch

    import ringrun.torch as hvd

    signal.signal(signal.SIGTERM, lambda *_: None)
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    grads = [torch.ones(50_000) for _ in range(4)]
    for step in range(1_000_000):
        if r == n - 1 and step == 20:
            os.kill(os.getpid(), signal.SIGKILL)
        start = time.monotonic()
        try:
            handles = [hvd.allreduce_async_(g, name=f"grad.{i}", op=hvd.Sum) for i, g in enumerate(grads)]
            for h in handles:
                hvd.synchronize(h)
            for g in grads:
                g.fill_(1.0)
        except hvd.InternalError as e:
            print(f"SURVIVOR {r} raised after {time.monotonic() - start:.3f} s: {e}", flush=True)
            # Exit 0: ringrun's status must be the killed rank's, whichever exit it reaps first.
            os._exit(0)
    raise AssertionError("the loop ended without the peer's death")


def driver():
    n = int(os.environ.get("RINGRUN_TEST_NP", "2"))
    ringrun = os.environ["RINGRUN"]
    started = time.monotonic()
    run = subprocess.run([ringrun, "-np", str(n), "--grace-period", "10", sys.executable, __file__, "--worker"],
                         capture_output=True, text=True, timeout=60)
    out = run.stdout + run.stderr
    assert run.returncode == 128 + signal.SIGKILL, (run.returncode, out)
    survivors = re.findall(r"SURVIVOR (\d+) raised after ([0-9.]+) s: (.*)", out)
    assert sorted(int(s[0]) for s in survivors) == list(range(n - 1)), out
    for rank, seconds, message in survivors:
        assert float(seconds) < 5.0, (rank, seconds, message)
        assert str(n - 1) in message, ("the message names the dead rank", message)
    assert f"ringrun: rank {n - 1} (host" in out and "SIGKILL" in out, out
    print(f"{n} ranks: survivors raised in {[s[1] for s in survivors]} s; whole run {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    worker() if "--worker" in sys.argv else driver()
