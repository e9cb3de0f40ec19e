#!/usr/bin/env python3
"""ringrun in Kubernetes pods, on scripts/test-k8s's pods (namespaces, real sshd, DNS, the
operator's files and variables), one case per run: ``k8s_test.py CASE``. Needs root; exits 77
(skipped) where the pods cannot be made. Settings: RINGRUN (the program), PYTHON (with torch).

Cases (README, On Kubernetes):
  mpijob_ompi4   1 launcher + 3 workers x 2 slots, Open MPI 4: `ringrun PYTHON train` with no
                 flags trains on the 6 worker slots (none on the launcher) to the parameters of a
                 single-process run of the global batch
  mpijob_ompi5   the same under Open MPI 5 (PyPI's), whose mpirun ignores the operator's orte_*
  as_worker      runLauncherAsWorker: the launcher's own FQDN in the hostfile runs ranks there too
  dns            a worker whose DNS record never appears: the launch fails within --start-timeout,
                 naming it
  perpod         3 pods x 2 ranks, every pod running ringrun (PET_*), no ssh: one world that trains
  elastic        --min-np 4: a worker deleted mid-run and recreated with a new address; the job
                 goes on from its last commit, grows back to 6 ranks and ends equal on every rank
  sigterm        the kubelet's SIGTERM to ringrun in a pod: every rank gets it and saves a
                 checkpoint within --grace-period
"""
import os
import re
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TEST_K8S = os.path.join(ROOT, "scripts", "test-k8s")
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import elastic_train  # noqa: E402  (the training, its events and its single-process replay)

RINGRUN = os.environ.get("RINGRUN", "ringrun")
PYTHON = os.environ.get("PYTHON", sys.executable)
TRAIN = os.path.join(ROOT, "tests", "python", "elastic_train.py")
ENV = ["env", "OMP_NUM_THREADS=1", "PYTHONDONTWRITEBYTECODE=1"]


def k8s(*args, check=True, timeout=120):
    result = subprocess.run([TEST_K8S, *args], capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"test-k8s {' '.join(args)}: exit {result.returncode}\n{result.stdout}{result.stderr}")
    return result


def run_in(pod, cmd, timeout, on_line=None):
    """Runs CMD in POD; returns (status, lines). Killed (and failed) at the timeout."""
    return elastic_train.run_lines([TEST_K8S, "exec", pod, "--", *cmd], timeout, on_line)


def train(total, step_sleep=0.0, env=()):
    return [*ENV, *env, PYTHON, TRAIN, "--worker", "plain", str(total), str(step_sleep), f"k8s-{os.getpid()}"]


def check_training(lines, size, hosts_not=()):
    finals = elastic_train.events(lines, "FINAL")
    starts = elastic_train.events(lines, "START")
    steps = elastic_train.events(lines, "STEP")
    worst, n = elastic_train.check_final(finals, list(range(size)), size, lines, steps)
    hosts = sorted({s["host"] for s in starts})
    for h in hosts_not:
        assert all(not x.startswith(h) for x in hosts), (f"a rank ran on {h}", hosts)
    print(f"ok: {size} ranks on {hosts} trained {n} steps equal to one process (max diff {worst:.2e})")
    return hosts


def mpijob(mpi, as_worker=False):
    args = ["up", "--workers", "3", "--slots", "2", "--mpi", mpi] + (["--launcher-as-worker"] if as_worker else [])
    k8s(*args)
    if mpi == "openmpi4" and not as_worker:
        check_plan_and_doctor()
    started = time.monotonic()
    status, lines = run_in("launcher", [RINGRUN, *train(12)], timeout=240)
    assert status == 0, f"exit {status}:\n" + "\n".join(lines)
    size = 8 if as_worker else 6
    hosts = check_training(lines, size, hosts_not=() if as_worker else ("job-launcher",))
    assert len(hosts) == size // 2, hosts
    print(f"ok: {mpi}: MPIJob from the hostfile alone in {time.monotonic() - started:.1f} s")


def check_plan_and_doctor():
    """--dry-run names the hostfile and plans the workers' slots; doctor checks DNS, ssh and slots."""
    status, lines = run_in("launcher", [RINGRUN, "--dry-run", "true"], timeout=60)
    assert status == 0, lines
    assert lines[0] == ("MPIJob hostfile /etc/mpi/hostfile (OMPI_MCA_orte_default_hostfile=/etc/mpi/hostfile): "
                        "3 hosts x 2 slots"), lines
    assert lines[1].startswith("command: mpirun "), lines
    ranks = [line.split()[1] for line in lines[3:] if re.match(r"^\s*\d+ ", line)]
    assert ranks == [f"job-worker-{i // 2}.job.default.svc" for i in range(6)], lines
    status, lines = run_in("launcher", [RINGRUN, "doctor"], timeout=120)
    text = "\n".join(lines)
    for check in ("mpijob hostfile", "mpijob dns", "mpijob ssh"):
        assert re.search(rf"^PASS +{check} ", text, re.M), text
    assert "ssh reaches all 3 hosts" in text, text
    print("ok: --dry-run and doctor in the launcher pod")


def case_dns():
    k8s("up", "--workers", "3", "--slots", "2")
    k8s("delete", "worker-2", "--grace", "1")  # its record goes; the operator's hostfile keeps it
    started = time.monotonic()
    status, lines = run_in("launcher", [RINGRUN, "--start-timeout", "3", "true"], timeout=60)
    took = time.monotonic() - started
    text = "\n".join(lines)
    assert status == 1, (status, text)
    assert "job-worker-2.job.default.svc" in text and "did not resolve within 3 s" in text, text
    assert "job-worker-0" not in text.split("did not resolve")[0].split("host")[-1], text
    assert took < 15, took
    status, doctor = run_in("launcher", [RINGRUN, "doctor"], timeout=120)
    text = "\n".join(doctor)
    assert status == 1 and re.search(r"^FAIL +mpijob dns +1 of 3 hosts do not resolve: job-worker-2\.job", text, re.M), text
    print(f"ok: the never-resolving worker named in {took:.1f} s: {lines[-1]}")


def case_perpod():
    k8s("up", "--mode", "perpod", "--workers", "3", "--slots", "2")
    results = {}

    def pod(i):
        results[i] = run_in(f"worker-{i}", [RINGRUN, *train(12)], timeout=240)

    threads = [threading.Thread(target=pod, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = []
    for i in range(3):
        status, out = results[i]
        assert status == 0, f"pod {i}: exit {status}:\n" + "\n".join(out)
        lines += out
    hosts = check_training(lines, 6)
    assert len(hosts) == 3, hosts


def case_elastic():
    k8s("up", "--workers", "3", "--slots", "2")
    seen = {"deleted": False}

    def on_line(line):
        # After the first commits, worker-1 goes (SIGTERM, then SIGKILL after the grace) and comes
        # back under its name with a new address.
        if not seen["deleted"] and re.search(r"STEP e=0 pn=2[0-9]", line):
            seen["deleted"] = True
            threading.Thread(target=lambda: (k8s("delete", "worker-1", "--grace", "2"),
                                             time.sleep(2), k8s("recreate", "worker-1"))).start()

    # It ends only once back at 6 ranks (and 4 batches there): under load the worker's return may
    # take longer than the steps left.
    status, lines = run_in("launcher", [RINGRUN, "--min-np", "4", *train(60, 0.1, ["ELASTIC_TRAIN_GROW_TO=6"])],
                           timeout=300, on_line=on_line)
    text = "\n".join(lines)
    assert seen["deleted"], text
    assert status == 0, f"exit {status}:\n" + text
    finals = elastic_train.events(lines, "FINAL")
    assert finals and all(f["size"] == 6 for f in finals), (finals, text)
    assert len({f["sum"] for f in finals}) == 1, finals
    restores = elastic_train.events(lines, "RESTORE")
    assert all(r["to"] > 0 for r in restores), ("a restart from zero", restores)
    sizes = [t["size"] for t in elastic_train.events(lines, "TRAIN")]
    assert min(sizes) == 4, sizes
    steps = elastic_train.events(lines, "STEP")
    reference, history = elastic_train.replay(steps)
    params = [float(v) for v in finals[0]["params"].split(",")]
    worst = max(abs(a - b) for a, b in zip(params, reference))
    assert worst < 1e-4, worst
    print(f"ok: a worker lost and recreated: sizes {sorted(set(sizes))}, {len(history)} committed steps "
          f"equal to one process (max diff {worst:.2e})")


# A rank that saves a checkpoint when it is told to stop: one second's work after SIGTERM.
CHECKPOINTING = """
import os, signal, sys, time
path = sys.argv[1] + "." + os.environ["RINGRUN_RANK"]
def stop(signum, frame):
    time.sleep(1)
    with open(path + ".tmp", "w") as f:
        f.write("step 7")
    os.rename(path + ".tmp", path)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("READY", flush=True)
while True:
    time.sleep(0.1)
"""


def case_sigterm():
    k8s("up", "--mode", "perpod", "--workers", "1", "--slots", "2")
    checkpoint = f"/tmp/k8s-test-checkpoint-{os.getpid()}"
    ready = []

    def on_line(line):
        # The kubelet's SIGTERM goes to the container's main process: ringrun, never the ranks.
        if "READY" in line:
            ready.append(line)
            if len(ready) == 2:
                threading.Thread(target=lambda: k8s("exec", "worker-0", "--", "pkill", "-TERM", "-x", "ringrun")).start()

    started = time.monotonic()
    try:
        status, lines = run_in("worker-0", [RINGRUN, "--grace-period", "5", PYTHON, "-c", CHECKPOINTING, checkpoint],
                               timeout=60, on_line=on_line)
        took = time.monotonic() - started
        saved = [os.path.exists(f"{checkpoint}.{r}") for r in range(2)]
        assert len(ready) == 2 and all(saved), (saved, lines)
        assert status == 128 + signal.SIGTERM, (status, lines)
        assert took < 20, took
    finally:
        for r in range(2):
            if os.path.exists(f"{checkpoint}.{r}"):
                os.remove(f"{checkpoint}.{r}")
    print(f"ok: SIGTERM to ringrun: both ranks saved their checkpoint within --grace-period 5 ({took:.1f} s)")


CASES = {
    "mpijob_ompi4": lambda: mpijob("openmpi4"),
    "mpijob_ompi5": lambda: mpijob("openmpi5"),
    "as_worker": lambda: mpijob("openmpi4", as_worker=True),
    "dns": case_dns,
    "perpod": case_perpod,
    "elastic": case_elastic,
    "sigterm": case_sigterm,
}


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        sys.exit(f"usage: k8s_test.py {{{','.join(CASES)}}}")
    if os.geteuid() != 0:
        print("skipped: the pods need root (network namespaces, mounts)")
        sys.exit(77)
    if sys.argv[1] == "mpijob_ompi5" and not os.environ.get("RINGRUN_TEST_OMPI5_BIN"):
        print("skipped: no Open MPI 5 (RINGRUN_TEST_OMPI5_BIN; scripts/test makes one)")
        sys.exit(77)
    try:
        CASES[sys.argv[1]]()
    finally:
        down = k8s("down", check=False)
        if down.returncode != 0:
            print(down.stdout + down.stderr)
            sys.exit(1)


if __name__ == "__main__":
    main()
