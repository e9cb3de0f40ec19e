# ringrun-test: np=2 timeout=90 direct
"""The stall inspector from Python: a rank that submits a named op late makes rank 0 print a
stall warning (without a shutdown time, the op then completes), and with a shutdown time every
rank raises InternalError naming the tensor and the missing rank within seconds.

This script is the driver: it runs ringrun on the worker below (this file with --worker MODE)
and reads rank 0's stderr."""
import os
import re
import subprocess
import sys
import time

LATE = 3.0  # seconds rank 1 waits before submitting the op


def worker(mode):
    import torch

    import ringrun.torch as hvd

    hvd.init()
    r = hvd.rank()
    hvd.allreduce(torch.ones(1), name="warm")  # every rank past init
    if r == 1:
        time.sleep(LATE)
    start = time.monotonic()
    try:
        out = hvd.allreduce(torch.full((3,), float(r)), name="late.tensor", op=hvd.Sum)
        assert torch.equal(out, torch.full((3,), float(sum(range(hvd.size()))))), out
        print(f"RANK {r} completed after {time.monotonic() - start:.2f} s", flush=True)
    except hvd.InternalError as e:
        print(f"RANK {r} raised after {time.monotonic() - start:.2f} s: {e}", flush=True)
        if r == 0:
            time.sleep(LATE + 2.0)  # alive (its engine too) while rank 1 meets the stall in turn
    os._exit(0)  # the ranks are out of step after a stall shutdown: no collective finalize


def run(mode, *flags):
    ringrun = os.environ["RINGRUN"]
    cmd = [ringrun, "-np", "2", *flags, sys.executable, __file__, "--worker", mode]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, (mode, result.returncode, result.stdout, result.stderr)
    return result.stdout + result.stderr


def driver():
    out = run("warn", "--stall-check-warning-time-seconds", "1")
    warnings = re.findall(r"\[0\]<stderr>:ringrun: stall warning: tensor 'allreduce.late.tensor' .* has waited ([0-9.]+) s: "
                          r"submitted by rank 0, not by rank 1", out)
    assert warnings and float(warnings[0]) >= 1.0, out
    assert "RANK 0 completed" in out and "RANK 1 completed" in out, out

    out = run("shutdown", "--stall-check-shutdown-time-seconds", "1.5")
    raised = {m.group(1): float(m.group(2)) for m in re.finditer(r"RANK (\d) raised after ([0-9.]+) s", out)}
    assert set(raised) == {"0", "1"}, out
    assert 1.0 <= raised["0"] < LATE, out
    assert 1.0 <= raised["1"] < 5.0, out
    assert re.search(r"RANK 0 raised .*tensor 'allreduce.late.tensor'.*stalled.*not by rank 1", out), out
    assert re.search(r"RANK 1 raised .*tensor 'allreduce.late.tensor'.*stalled.*not by rank 0", out), out
    print(f"warnings at {warnings} s; stall shutdown raised on rank 0 after {raised['0']} s, rank 1 after {raised['1']} s")


if __name__ == "__main__":
    worker(sys.argv[2]) if "--worker" in sys.argv else driver()
