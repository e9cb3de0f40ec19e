"""Shared by the test_elastic_*.py drivers: the training each rank runs, the driver's launch of
`ringrun` in elastic mode, and a single-process replay of the training for reference.

Worker (under ringrun): ``elastic_train.py --worker MODE TOTAL STEP_SLEEP TOKEN``. Horovod's
example shape: a small MLP, SGD with momentum in a DistributedOptimizer, an ElasticSampler,
``TorchState(model, optimizer, sampler=..., epoch=0, batch=0)``, ``@hvd.elastic.run``, a commit
every 2 batches and at each epoch's end. In modes ``kill`` and ``refill`` the processes with the
elastic ids in $ELASTIC_TRAIN_VICTIM (default 1) SIGKILL themselves before their batch 5 (committed
at 4), in mode ``raise`` they raise RuntimeError there; the one with id $ELASTIC_TRAIN_DIE_IN_RESET
SIGKILLs itself in its reset callback. Lines (stdout):
  START id= pid= rank= size= world= host=  after init (host: HOROVOD_HOSTNAME)
  TRAIN id= pid= rank= size= world= batch= epoch= pn=   each (re)entry of train, after the sync
  RESTORE id= from= to=                    a rollback to the last commit
  RESET_CB id= size= world=                the reset callback, in each new world
  STEP e= pn= n=                           rank 0, each optimizer step (for the replay)
  DYING id= batch=                         before the SIGKILL
  LEFT id= pid= code=                      SystemExit out of train (removed from the job)
  BYE id= pid=                             at exit, after ringrun.torch's own shutdown
  FINAL id= pid= rank= size= world= batch= sum= params=   at the end
"""
import atexit
import hashlib
import os
import re
import signal
import subprocess
import sys
import threading
import time

N, B, FEATURES, HIDDEN = 48, 2, 6, 4  # samples, batch per rank
LR, MOMENTUM = 0.05, 0.9
# The elastic ids that die (kill, refill), each before its batch 5.
VICTIMS = {int(v) for v in os.environ.get("ELASTIC_TRAIN_VICTIM", "1").split(",")}


def data():
    import torch
    g = torch.Generator().manual_seed(7)
    x = torch.randn(N, FEATURES, generator=g)
    y = (x @ torch.randn(FEATURES, 1, generator=g)).tanh() + 0.1 * torch.randn(N, 1, generator=g)
    return x, y


def make_model(seed):
    import torch
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, 1))


def flat(model):
    import torch
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def worker(mode, total, step_sleep):
    import torch

    import ringrun.torch as hvd
    from ringrun import _ringrun

    torch.set_num_threads(1)
    # Outside elastic mode (a plain launch, the Kubernetes tests) the rank is the process's id.
    ident = int(os.environ.get("RINGRUN_ELASTIC_ID") or os.environ["RINGRUN_RANK"])
    pid = os.getpid()
    # Registered before init's own exit hook, so it runs after ringrun.torch's shutdown at exit.
    atexit.register(lambda: print(f"BYE id={ident} pid={pid}", flush=True))
    hvd.init()
    print(f"START id={ident} pid={pid} rank={hvd.rank()} size={hvd.size()} world={_ringrun.epoch()} "
          f"host={os.environ.get('HOROVOD_HOSTNAME')}", flush=True)
    x, y = data()
    model = make_model(1234 + ident)  # a different start on each process: the sync must fix it
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM),
                                         named_parameters=model.named_parameters())
    sampler = hvd.elastic.ElasticSampler(torch.utils.data.TensorDataset(x, y), shuffle=True, seed=3)

    class Tracked(hvd.elastic.TorchState):
        def restore(self):
            before = self.batch
            super().restore()
            print(f"RESTORE id={ident} from={before} to={self.batch}", flush=True)

    state = Tracked(model, optimizer, sampler=sampler, epoch=0, batch=0, grown=-1)
    def on_reset():
        print(f"RESET_CB id={ident} size={hvd.size()} world={_ringrun.epoch()}", flush=True)
        if str(ident) == os.environ.get("ELASTIC_TRAIN_DIE_IN_RESET"):  # before the sync of the new world
            print(f"DYING id={ident} batch={state.batch}", flush=True)
            os.kill(pid, signal.SIGKILL)

    state.register_reset_callbacks([on_reset])

    # The size the job must grow back to (and train 4 batches at) before it may end: refill's 3, or
    # $ELASTIC_TRAIN_GROW_TO. A job that loses a host may otherwise finish before it comes back.
    grow_to = int(os.environ.get("ELASTIC_TRAIN_GROW_TO") or (3 if mode == "refill" else 0))

    def done(state):
        if state.batch >= 2000:  # a bound: the driver then fails on the counts
            return True
        if grow_to:
            return state.batch >= total and hvd.size() == grow_to and 0 <= state.grown <= state.batch - 4
        return state.batch >= total

    @hvd.elastic.run
    def train(state):
        n, r = hvd.size(), hvd.rank()
        if grow_to and n == grow_to and _ringrun.epoch() > 0 and state.grown < 0:
            state.grown = state.batch  # the same on every rank: the state was just synced
        print(f"TRAIN id={ident} pid={pid} rank={r} size={n} world={_ringrun.epoch()} batch={state.batch} "
              f"epoch={state.epoch} pn={state.sampler.processed_num}", flush=True)
        while not done(state):
            mine = list(state.sampler)
            for k in range((N - state.sampler.processed_num) // (B * n)):
                if done(state):
                    break
                if mode in ("kill", "refill", "raise") and ident in VICTIMS and state.batch == 5:
                    print(f"DYING id={ident} batch={state.batch}", flush=True)
                    if mode == "raise":  # an error the training does not recover from
                        raise RuntimeError(f"id {ident} fails at batch 5")
                    os.kill(pid, signal.SIGKILL)
                idx = mine[k * B:(k + 1) * B]
                pn = state.sampler.processed_num
                optimizer.zero_grad()
                torch.nn.functional.mse_loss(model(x[idx]), y[idx]).backward()
                optimizer.step()
                if r == 0:
                    print(f"STEP e={state.epoch} pn={pn} n={n}", flush=True)
                state.sampler.record_batch(k, B)
                state.batch += 1
                if step_sleep:
                    time.sleep(step_sleep)
                if state.batch % 2 == 0:
                    state.commit()
            else:
                state.epoch += 1
                state.sampler.set_epoch(state.epoch)
                state.commit()

    try:
        train(state)
    except SystemExit as e:
        print(f"LEFT id={ident} pid={pid} code={e.code}", flush=True)
        raise
    params = flat(model)
    digest = hashlib.sha256(params.numpy().tobytes()).hexdigest()[:16]
    print(f"FINAL id={ident} pid={pid} rank={hvd.rank()} size={hvd.size()} world={_ringrun.epoch()} "
          f"batch={state.batch} sum={digest} params={','.join(repr(v) for v in params.tolist())}", flush=True)


# ---- driver side ----

def launch(np, ringrun_args, mode, total, step_sleep, timeout, on_line=None):
    """Runs `ringrun -np NP ARGS python3 elastic_train.py --worker ...`; returns (status, lines,
    seconds). on_line(line) sees each output line as it comes. Kills the job at the timeout, and
    fails if any process of it is left afterwards."""
    token = f"elastic-test-{os.getpid()}-{time.monotonic_ns()}"
    cmd = [os.environ["RINGRUN"], "-np", str(np), *ringrun_args, os.environ.get("PYTHON", sys.executable),
           os.path.abspath(__file__), "--worker", mode, str(total), str(step_sleep), token]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    started = time.monotonic()
    status, lines = run_lines(cmd, timeout, on_line, env=env)
    seconds = time.monotonic() - started
    deadline = time.monotonic() + 5
    while left_behind(token) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left_behind(token), f"processes left behind: {left_behind(token)}"
    return status, lines, seconds


def run_lines(cmd, timeout, on_line=None, env=None):
    """Runs CMD in a session of its own, stdout and stderr together; returns (status, lines).
    on_line(line) sees each line as it comes. At the timeout the session is killed and this fails."""
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    expired = []
    timer = threading.Timer(timeout, lambda: (expired.append(1), os.killpg(proc.pid, signal.SIGKILL)))
    timer.start()
    lines = []
    TIMELINE.clear()
    try:
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            TIMELINE.append(f"+{time.monotonic() - started:7.3f} s  {lines[-1]}")
            if on_line:
                on_line(line)
        status = proc.wait()
        TIMELINE.append(f"+{time.monotonic() - started:7.3f} s  (ringrun exited {status})")
    finally:
        timer.cancel()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    # A run past its bound shows when each line came, so a stall is seen where it happened.
    assert not expired, f"{' '.join(cmd)} ran past {timeout} s:\n" + "\n".join(TIMELINE)
    return status, lines


# The last run's lines, each with the seconds since its start (run_lines): tests print it.
TIMELINE = []


def left_behind(token):
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if token.encode() in f.read():
                        pids.append(int(entry))
            except OSError:
                pass
    return pids


def events(lines, kind):
    """The KIND lines as dicts of their key=value fields (ints where they parse)."""
    found = []
    for line in lines:
        m = re.search(rf"\b{kind} ((?:\w+=\S*\s*)+)$", line)
        if m:
            fields = dict(kv.split("=", 1) for kv in m.group(1).split())
            found.append({k: int(v) if re.fullmatch(r"-?\d+", v) else v for k, v in fields.items()})
    return found


def replay(steps):
    """Single-process training over the committed history of rank 0's STEP lines (a step redone
    after a rollback replaces the ones from its position on); returns the final parameters."""
    import random

    import torch
    history = []
    for s in steps:
        key = (s["e"], s["pn"])
        history = [h for h in history if (h["e"], h["pn"]) < key] + [s]
    x, y = data()
    model = make_model(1234)  # rank 0's (id 0's) start, which the first sync gave everyone
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    for s in history:
        order = list(range(N))
        random.Random(3 + s["e"]).shuffle(order)
        idx = order[s["pn"]:s["pn"] + B * s["n"]]  # the n ranks' batches together
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x[idx]), y[idx]).backward()
        optimizer.step()
    return flat(model).tolist(), history


def check_final(finals, expected_ids, expected_size, lines, steps):
    assert sorted(f["id"] for f in finals) == sorted(expected_ids), (finals, "\n".join(lines))
    assert len({f["sum"] for f in finals}) == 1, ("parameters differ across ranks", finals)
    assert all(f["size"] == expected_size for f in finals), finals
    params = [float(v) for v in finals[0]["params"].split(",")]
    reference, history = replay(steps)
    worst = max(abs(a - b) for a, b in zip(params, reference))
    assert worst < 1e-4, (f"the final parameters differ from a single-process replay of the {len(history)} "
                          f"committed steps by {worst}", params, reference)
    return worst, len(history)


if __name__ == "__main__" and "--worker" in sys.argv:
    at = sys.argv.index("--worker")
    worker(sys.argv[at + 1], int(sys.argv[at + 2]), float(sys.argv[at + 3]))
