# ringrun-test: np=2 timeout=90 direct
"""Ctrl-C on a rank blocked in a collective: the rank raises KeyboardInterrupt within a second (the
wait gives Python's signal handler a turn every tenth of a second), and the other rank's pending
allreduce then fails with InternalError naming it, instead of hanging. The same for a rank blocked
in init() because its peer has not started.

This script is the driver: it runs ringrun on the workers below (this file with --worker or
--init-worker), sends SIGINT to rank 0's process only, and reads what both ranks print."""
import os
import re
import signal
import subprocess
import sys
import time


def worker():
    import torch

    import ringrun.torch as hvd

    hvd.init()
    r = hvd.rank()
    if r == 1:
        # The launcher stops the other ranks once rank 0 exits (SIGTERM, then SIGKILL after the
        # grace period): rank 1 stays for the grace period to show how its allreduce ends.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    hvd.allreduce(torch.ones(1), name="warm")
    print(f"RANK {r} PID {os.getpid()}", flush=True)
    start = time.monotonic()
    try:
        if r == 0:
            hvd.allreduce(torch.ones(4), name="never.completes")  # rank 1 never submits it
        else:
            hvd.allreduce(torch.ones(4), name="other.name")        # nor rank 0 this one
        print(f"RANK {r} completed", flush=True)
    except KeyboardInterrupt:
        print(f"RANK {r} interrupted at {time.time():.6f}", flush=True)
        os._exit(3)  # as a user's Ctrl-C ends the program: no finalize
    except hvd.InternalError as e:
        print(f"RANK {r} raised after {time.monotonic() - start:.2f} s: {e}", flush=True)
        os._exit(4)


def init_worker():
    import ringrun.torch as hvd

    r = int(os.environ["RINGRUN_RANK"])
    print(f"RANK {r} PID {os.getpid()}", flush=True)
    if r == 1:
        time.sleep(60)  # starts late: rank 0 waits in init() at the rendezvous
        return
    print("RANK 0 calls init", flush=True)
    try:
        hvd.init()
        print("RANK 0 initialised", flush=True)
    except KeyboardInterrupt:
        print(f"RANK 0 interrupted at {time.time():.6f}", flush=True)
        os._exit(3)


def start(flag):
    """ringrun on this file's worker; returns the process, the lines read so far and rank 0's pid."""
    cmd = [os.environ["RINGRUN"], "-np", "2", "--grace-period", "5", sys.executable, __file__, flag]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, pid0 = [], None
    deadline = time.monotonic() + 60
    while pid0 is None and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"RANK 0 PID (\d+)", line)
        if m:
            pid0 = int(m.group(1))
    assert pid0, "".join(lines)
    return proc, lines, pid0


def interrupt_rank0(proc, lines, pid0, what):
    """SIGINT to rank 0 alone; returns the run's output once ringrun ends, and how long after the
    signal rank 0 reported its KeyboardInterrupt (under a second, asserted)."""
    sent = time.time()
    os.kill(pid0, signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    text = "".join(lines) + out
    m = re.search(r"RANK 0 interrupted at ([0-9.]+)", text)
    assert m, text
    took = float(m.group(1)) - sent
    assert took < 1.0, f"{what}: KeyboardInterrupt came {took:.2f} s after SIGINT\n{text}"
    assert proc.returncode != 0, text
    return text, took


def driver_init():
    proc, lines, pid0 = start("--init-worker")
    while not any("RANK 0 calls init" in line for line in lines):
        line = proc.stdout.readline()
        assert line, "".join(lines)
        lines.append(line)
    time.sleep(1.0)  # rank 0 waits in init() for rank 1, asleep
    _, took = interrupt_rank0(proc, lines, pid0, "init()")
    print(f"init(): rank 0 raised KeyboardInterrupt {took:.3f} s after SIGINT")


def driver():
    proc, lines, pid0 = start("--worker")
    time.sleep(1.0)  # both ranks are in their allreduce
    text, took = interrupt_rank0(proc, lines, pid0, "allreduce")
    assert re.search(r"RANK 1 raised after [0-9.]+ s: .*rank 0", text), text
    print(f"rank 0 raised KeyboardInterrupt {took:.3f} s after SIGINT; rank 1 failed naming rank 0")


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker()
    elif "--init-worker" in sys.argv:
        init_worker()
    else:
        driver()
        driver_init()
