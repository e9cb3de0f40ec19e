"""ringrun.torch against torch.distributed (gloo) on the same ranks: scripts/bench-torch.

Run it through scripts/bench-torch (which starts it under `ringrun -np N`); every rank runs this
file. Both libraries live in the same processes: ringrun.torch.init(), then
torch.distributed.init_process_group("gloo", init_method="env://") on the RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT that ringrun gives every rank. Each case alternates blocks of the two
contenders on identical model copies and data, so load drift on a shared host hits both alike.

Cases (one row each):
  mlp      one training step (forward, backward, SGD step) of 8 Linear(1024, 1024) layers with
           ReLU, batch 16 per rank, MSE loss: 8.4 M parameters, 33.6 MB of gradients.
           ringrun: hvd.DistributedOptimizer(SGD, named_parameters=...); peer: DDP(gloo) + SGD.
  conv     the same with torchvision's ResNet-18, 10 classes (11.2 M parameters, 44.7 MB of gradients; an
           equivalent small conv net where torchvision is missing), batch 8 of 3 x 32 x 32,
           cross-entropy over 10 classes; model.train() (batch norm in training mode).
  latency  one 4-byte float32 allreduce (op Average): hvd.allreduce_(t) and hvd.allreduce(t) from
           Python against the C call ringrun_allreduce in a C loop in the same process
           (_ringrun.time_allreduce, GIL released), and torch.distributed.all_reduce(t) (gloo) as
           the peer. The engine runs (one async op first), as in a script that trains with the
           DistributedOptimizer; ringrun_allreduce then goes through it.

Timing: a block is `--steps` steps (training cases; by default as many as take about `--block-s`
seconds without communication, probed after the warm-up) or `--calls` calls (latency) after the
library's barrier; the block time is the slowest rank's; each case takes `--blocks` blocks per
contender, alternating (ABC CBA ...), after `--warmup` steps of each; rows report the median block.
ratio = ringrun_steps_per_s / ddp_steps_per_s (above 1: ringrun is faster). A third copy of the
model trains in the same blocks without any communication ("local"): its steps per second are the
compute-only ceiling, and 1/contender - 1/local is what communication adds to a step. For latency
the "steps per second" columns hold calls per second of hvd.allreduce_ and of gloo's all_reduce
(ratio = gloo_us / python_us), and a comment line gives the per-call microseconds and the
Python - C differences (the target: <= 5 us).

The step's matrix products run on whatever BLAS torch loads (the header names it): Debian's
torch uses the system libblas.so.3, the netlib reference BLAS unless OpenBLAS is installed, which
makes the MLP's step about 8x slower and compute-bound. To measure with OpenBLAS without changing
the system: `apt-get download libopenblas0-pthread; dpkg -x libopenblas0-pthread_*.deb /tmp/ob`,
then `LD_LIBRARY_PATH=/tmp/ob/usr/lib/x86_64-linux-gnu/openblas-pthread OPENBLAS_NUM_THREADS=1
scripts/bench-torch`.
"""

import argparse
import copy
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import ringrun.torch as hvd
from ringrun import _ringrun

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_torch_collectives import COLLECTIVE_CASES, collective_rows  # noqa: E402
from torch_models import make_conv, make_mlp  # noqa: E402

# Exposed communication (step time above the same step without communication) at most this
# fraction of DDP's, on the training cases; latency: python - C <= 5 us.
COMM_TARGET = 0.2
LATENCY_TARGET_US = 5.0


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="bench-torch",
        description="Steps per second of a training step through ringrun.torch's DistributedOptimizer "
                    "against torch DistributedDataParallel (gloo), alternating in one run, and the "
                    "cost of a 4-byte hvd.allreduce from Python against the C call.")
    p.add_argument("--case", choices=["mlp", "conv", "latency", *COLLECTIVE_CASES, "collectives", "all"], default="all")
    p.add_argument("--steps", type=int, default=0,
                   help="training steps per block (default: as many as take about --block-s seconds without "
                        "communication, at least 3)")
    p.add_argument("--block-s", type=float, default=1.5, help="target seconds per block (default 1.5)")
    p.add_argument("--blocks", type=int, default=7, help="blocks per contender and case (default 7)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps of each contender first (default 3)")
    p.add_argument("--calls", type=int, default=2000, help="latency: calls per block (default 2000)")
    p.add_argument("--conv-model", default="resnet18",
                   help="conv case's model: resnet18 (torchvision's, or the same architecture without it), or "
                        "another torchvision model")
    p.add_argument("--collective-mb", type=float, default=16.0,
                   help="collective cases: MB of float32 per rank (default 16)")
    p.add_argument("--conv-batch", type=int, default=8)
    p.add_argument("--conv-image", type=int, default=32)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    return p.parse_args(argv)


def log(*args):
    if hvd.rank() == 0:
        print(*args, flush=True)


def slowest(values):
    """Element-wise max over ranks of a list of floats (through gloo, outside any timed block)."""
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


# ---------------------------------------------------------------------------------------------
# Training cases


def train_case(name, model_fn, batch_fn, loss_fn, steps, args):
    torch.manual_seed(1234)  # the same initial weights on every rank and for both copies
    base, what = model_fn()
    nparams = sum(p.numel() for p in base.parameters())
    model_ddp = torch.nn.parallel.DistributedDataParallel(copy.deepcopy(base))
    opt_ddp = torch.optim.SGD(model_ddp.parameters(), lr=0.01)
    model_rr = copy.deepcopy(base)
    hvd.broadcast_parameters(model_rr.state_dict(), root_rank=0)
    opt_rr = hvd.DistributedOptimizer(torch.optim.SGD(model_rr.parameters(), lr=0.01),
                                      named_parameters=model_rr.named_parameters())
    # Per-rank data, the same for both contenders; a few fixed batches cycled.
    gen = torch.Generator().manual_seed(100 + hvd.rank())
    batches = [batch_fn(gen) for _ in range(4)]

    def step(model, opt, i):
        x, y = batches[i % len(batches)]
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    # A third copy trains without any communication: the compute-only ceiling of a step here.
    model_local = copy.deepcopy(base)
    opt_local = torch.optim.SGD(model_local.parameters(), lr=0.01)
    contenders = {
        "ringrun": (model_rr, opt_rr, hvd.barrier),
        "ddp": (model_ddp, opt_ddp, dist.barrier),
        "local": (model_local, opt_local, dist.barrier),
    }
    counters = {k: 0 for k in contenders}

    def run(key, n):
        model, opt, barrier = contenders[key]
        barrier()
        t0 = time.perf_counter()
        for _ in range(n):
            step(model, opt, counters[key])
            counters[key] += 1
        return time.perf_counter() - t0

    for key in contenders:
        run(key, args.warmup)
    if not steps:
        # About --block-s seconds per block, at least 3 steps: the probe is a block of the local copy.
        probe = slowest([run("local", 2) / 2])[0]
        steps = max(3, round(args.block_s / probe))
    times = {k: [] for k in contenders}
    order = list(contenders)
    for b in range(args.blocks):
        for key in (order if b % 2 == 0 else order[::-1]):  # ABBA: neither always goes first
            times[key].append(run(key, steps))
    for key in times:
        times[key] = slowest(times[key])

    # Sanity: both copies took the same steps on the same data from the same weights.
    diff = max((a - b).abs().max().item()
               for a, b in zip(model_rr.parameters(), model_ddp.module.parameters()))
    diff = slowest([diff])[0]
    rr = steps / statistics.median(times["ringrun"])
    ddp = steps / statistics.median(times["ddp"])
    local = steps / statistics.median(times["local"])
    return {
        "case": name, "ranks": hvd.size(), "model": what, "parameters": nparams,
        "grad_bytes": 4 * nparams, "steps_per_block": steps, "blocks": args.blocks,
        "ringrun_steps_per_s": rr, "ddp_steps_per_s": ddp, "ratio": rr / ddp,
        "local_steps_per_s": local,
        "ringrun_comm_ms_per_step": 1e3 * (1 / rr - 1 / local), "ddp_comm_ms_per_step": 1e3 * (1 / ddp - 1 / local),
        # Exposed communication, ringrun's over DDP's (below 1: ringrun hides more of it).
        "comm_ratio": (1 / rr - 1 / local) / (1 / ddp - 1 / local) if ddp < local else float("nan"),
        "target": COMM_TARGET,
        "ringrun_block_s": times["ringrun"], "ddp_block_s": times["ddp"], "local_block_s": times["local"],
        "max_param_diff": diff,
    }


def mlp_case(args):
    def batch(gen):
        return torch.randn(16, 1024, generator=gen), torch.randn(16, 1024, generator=gen)

    def model_fn():
        return make_mlp(), "8 x Linear(1024, 1024), batch 16"

    return train_case("mlp", model_fn, batch, torch.nn.functional.mse_loss, args.steps, args)


def conv_case(args):
    n, s = args.conv_batch, args.conv_image

    def batch(gen):
        return torch.randn(n, 3, s, s, generator=gen), torch.randint(0, 10, (n,), generator=gen)

    def model_fn():
        model, what = make_conv(args.conv_model)
        return model, f"{what}, batch {n} x 3 x {s} x {s}"

    return train_case("conv", model_fn, batch, torch.nn.functional.cross_entropy, args.steps, args)


# ---------------------------------------------------------------------------------------------
# Latency case


def latency_case(args):
    t = torch.ones(1, dtype=torch.float32)
    # Start the engine, as a training script's optimizer does: from then on the synchronous
    # ringrun_allreduce goes through it.
    hvd.synchronize(hvd.allreduce_async_(torch.ones(1), name="bench_torch.engine_start"))
    calls = args.calls
    ptr, code, op = t.data_ptr(), _ringrun.FLOAT32, _ringrun.AVERAGE

    def py_inplace():
        hvd.barrier()
        t0 = time.perf_counter()
        for _ in range(calls):
            hvd.allreduce_(t)
        return time.perf_counter() - t0

    def py_out():
        hvd.barrier()
        t0 = time.perf_counter()
        for _ in range(calls):
            hvd.allreduce(t)
        return time.perf_counter() - t0

    def c_loop():
        hvd.barrier()
        return _ringrun.time_allreduce(ptr, 1, code, op, calls)

    def gloo():
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(calls // 10):  # gloo is ~100x slower per call here; keep blocks short
            dist.all_reduce(t)
        return (time.perf_counter() - t0) * 10

    fns = {"python_allreduce_": py_inplace, "python_allreduce": py_out, "c": c_loop, "gloo": gloo}
    for fn in fns.values():
        fn()
    times = {k: [] for k in fns}
    order = list(fns)
    for b in range(args.blocks):
        for key in (order if b % 2 == 0 else order[::-1]):
            times[key].append(fns[key]())
    us = {}
    for key in times:
        times[key] = slowest(times[key])
        us[key] = statistics.median(times[key]) / calls * 1e6
    return {
        "case": "latency", "ranks": hvd.size(), "calls_per_block": calls, "blocks": args.blocks,
        "ringrun_steps_per_s": 1e6 / us["python_allreduce_"], "ddp_steps_per_s": 1e6 / us["gloo"],
        "ratio": us["gloo"] / us["python_allreduce_"],
        "python_inplace_us": us["python_allreduce_"], "python_us": us["python_allreduce"],
        "c_us": us["c"], "gloo_us": us["gloo"],
        "inplace_minus_c_us": us["python_allreduce_"] - us["c"],
        "outofplace_minus_c_us": us["python_allreduce"] - us["c"],
        "target_us": LATENCY_TARGET_US,
    }


# ---------------------------------------------------------------------------------------------


def verdict(row):
    if row["case"] == "latency":
        worst = max(row["inplace_minus_c_us"], row["outofplace_minus_c_us"])
        return "met" if worst <= LATENCY_TARGET_US else "not met"
    if row["case"] in COLLECTIVE_CASES:
        return "-"
    return "met" if row["comm_ratio"] <= COMM_TARGET else "not met"


def blas_library():
    """The BLAS this process loaded (torch's Linear layers run on it): /proc/self/maps after a matmul."""
    torch.randn(8, 8) @ torch.randn(8, 8)
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "blas" in line.lower() and "/" in line}
    except OSError:
        return "unknown"
    return ", ".join(sorted(os.path.realpath(p) for p in paths if "lapack" not in p)) or "none found (MKL?)"


def main(argv):
    args = parse_args(argv)
    hvd.init()
    dist.init_process_group("gloo", init_method="env://")
    torch.manual_seed(0)
    groups = {"all": ["mlp", "conv", "latency", *COLLECTIVE_CASES], "collectives": list(COLLECTIVE_CASES)}
    cases = groups.get(args.case, [args.case])
    rows = []
    fns = {"mlp": mlp_case, "conv": conv_case, "latency": latency_case}
    fns.update({case: (lambda a, c=case: collective_rows(c, a, slowest)) for case in COLLECTIVE_CASES})
    for case in cases:
        t0 = time.perf_counter()
        row = fns[case](args)
        if row is None:  # not at this number of ranks (processset_allreduce below 3)
            log(f"# {case}: skipped at {hvd.size()} ranks")
            continue
        row["case_seconds"] = time.perf_counter() - t0
        row["verdict"] = verdict(row)
        rows.append(row)
    from ringrun._ringrun import variables
    env = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MALLOC_TOP_PAD_", "MALLOC_MMAP_THRESHOLD_",
                                          variables.FUSION_THRESHOLD_MB, variables.CYCLE_TIME_MS)}
    header = {
        "torch": torch.__version__, "threads_per_rank": torch.get_num_threads(),
        "transport": _ringrun.transport_name(), "env": env,
        "load_1min": os.getloadavg()[0], "blas": blas_library(),
    }
    if hvd.rank() == 0:
        if args.json:
            print(json.dumps({"header": header, "rows": rows}, indent=1), flush=True)
        else:
            knobs = ", ".join(f"{k}={v}" for k, v in env.items() if v is not None)
            print(f"# bench-torch: {hvd.size()} ranks, torch {torch.__version__}, {torch.get_num_threads()} "
                  f"torch thread(s) per rank, ringrun transport {header['transport']}; {knobs}", flush=True)
            print(f"# BLAS: {header['blas']}")
            print(f"# load average (1 min) at the end: {header['load_1min']:.2f}")
            print(f"# median of {args.blocks} alternating blocks per contender, slowest rank; peer: torch "
                  "DistributedDataParallel (gloo) / torch.distributed (gloo) for the same call; comm_ratio: "
                  "ringrun's exposed communication per step over DDP's")
            print(f"{'case':>14} {'ranks':>5} {'ringrun_steps_per_s':>19} {'ddp_steps_per_s':>15} {'ratio':>7} "
                  f"{'comm_ratio':>10} {'target':>9} {'verdict':>8}")
            for r in rows:
                target = (f"<={LATENCY_TARGET_US:g}us" if r["case"] == "latency" else
                          f"<={r['target']:g}" if r.get("target") else "-")
                comm = f"{r['comm_ratio']:.3f}" if "comm_ratio" in r else "-"
                print(f"{r['case']:>14} {r['ranks']:>5} {r['ringrun_steps_per_s']:>19.2f} {r['ddp_steps_per_s']:>15.2f} "
                      f"{r['ratio']:>7.3f} {comm:>10} {target:>9} {r['verdict']:>8}")
            for r in rows:
                if r["case"] in COLLECTIVE_CASES:
                    print(f"# {r['case']}: {r['what']}; ms per call: ringrun {r['ringrun_ms']:.3f}, "
                          f"{r['peer']} {r['peer_ms']:.3f}")
                elif r["case"] == "latency":
                    print("# latency, 4-byte float32 allreduce (Average), us per call: "
                          f"hvd.allreduce_ {r['python_inplace_us']:.2f}, hvd.allreduce {r['python_us']:.2f}, "
                          f"C ringrun_allreduce {r['c_us']:.2f}, gloo all_reduce {r['gloo_us']:.2f}; "
                          f"python - C: {r['inplace_minus_c_us']:.2f} (in place), "
                          f"{r['outofplace_minus_c_us']:.2f} (out of place)")
                else:
                    print(f"# {r['case']}: {r['model']}, {r['parameters']} parameters; {r['steps_per_block']} "
                          f"steps per block; {r['case_seconds']:.0f} s; max |ringrun - ddp| parameter "
                          f"after the run {r['max_param_diff']:.2e}")
                    print(f"# {r['case']}: no communication (local SGD, same blocks) {r['local_steps_per_s']:.2f} "
                          f"steps/s; time per step above it: ringrun {r['ringrun_comm_ms_per_step']:.1f} ms, "
                          f"ddp {r['ddp_comm_ms_per_step']:.1f} ms")
    dist.barrier()
    dist.destroy_process_group()
    hvd.shutdown()


if __name__ == "__main__":
    main(sys.argv[1:])
