"""scripts/bench-torch's collective cases: one call of a collective through ringrun.torch against
the call a torch.distributed user makes for the same result (gloo), alternating blocks in the
same ranks, median of the slowest rank's blocks. ratio = peer time / ringrun time (above 1:
ringrun is faster).

  reducescatter      hvd.reducescatter(t, op=Sum) of --collective-mb per rank; peer
                     dist.reduce_scatter_tensor where gloo has it, else what a gloo user does:
                     dist.all_reduce then this rank's rows
  alltoall           hvd.alltoall(t) (even splits) of --collective-mb per rank; peer dist.all_to_all_single
  processset_allreduce  hvd.allreduce(t, op=Sum, process_set=the even ranks) of --collective-mb;
                     peer dist.all_reduce(t, group=dist.new_group(the even ranks)); from 3 ranks
                     (a set needs two ranks and may not be every rank)
"""

import statistics
import time

import torch
import torch.distributed as dist

import ringrun.torch as hvd

COLLECTIVE_CASES = ("reducescatter", "alltoall", "processset_allreduce")


def _time_blocks(fns, calls, blocks, barriers, slowest):
    for key, fn in fns.items():  # warm-up: connections, caches, the engine's response cache
        barriers[key]()
        fn()
    times = {k: [] for k in fns}
    order = list(fns)
    for b in range(blocks):
        for key in (order if b % 2 == 0 else order[::-1]):
            barriers[key]()
            t0 = time.perf_counter()
            for _ in range(calls):
                fns[key]()
            times[key].append(time.perf_counter() - t0)
    return {k: statistics.median(slowest(v)) / calls for k, v in times.items()}


def _peer_reducescatter(t, rows):
    out = torch.empty(rows, dtype=t.dtype)
    # torch's newest name for it first (reduce_scatter_tensor warns that it is deprecated there).
    for name in ("reduce_scatter_single", "reduce_scatter_tensor"):
        call = getattr(dist, name, None)
        if call is None:
            continue
        try:
            call(out, t)
            return (lambda: call(out, t)), f"torch.distributed.{name} (gloo)"
        except RuntimeError:
            pass  # this gloo build has none
    work = t.clone()

    def allreduce_then_slice():
        work.copy_(t)
        dist.all_reduce(work)
        return work[:rows]

    return allreduce_then_slice, "torch.distributed.all_reduce + slice (gloo has no reduce_scatter)"


def collective_rows(case, args, slowest):
    n, r = hvd.size(), hvd.rank()
    elements = int(args.collective_mb * (1 << 20) / 4) // n * n
    t = torch.ones(elements, dtype=torch.float32) * (r + 1)
    calls = max(1, int(4 / args.collective_mb))
    barriers = {"ringrun": hvd.barrier, "peer": dist.barrier}
    if case == "reducescatter":
        peer, peer_name = _peer_reducescatter(t, elements // n)
        fns = {"ringrun": lambda: hvd.reducescatter(t, op=hvd.Sum), "peer": peer}
        what = f"{elements * 4 / 2**20:.0f} MB of float32 per rank, Sum"
    elif case == "alltoall":
        out = torch.empty_like(t)
        fns = {"ringrun": lambda: hvd.alltoall(t), "peer": lambda: dist.all_to_all_single(out, t)}
        peer_name = "torch.distributed.all_to_all_single (gloo)"
        what = f"{elements * 4 / 2**20:.0f} MB of float32 per rank, even splits"
    else:
        if n < 3:
            return None
        members = [k for k in range(n) if k % 2 == 0]
        ps = hvd.add_process_set(members)
        group = dist.new_group(members)
        work = t.clone()
        if r in members:
            fns = {"ringrun": lambda: hvd.allreduce(t, op=hvd.Sum, process_set=ps),
                   "peer": lambda: dist.all_reduce(work, group=group)}
            barriers = {"ringrun": lambda: hvd.barrier(process_set=ps), "peer": lambda: dist.barrier(group=group)}
        else:
            fns = {"ringrun": lambda: None, "peer": lambda: None}
            barriers = {"ringrun": lambda: None, "peer": lambda: None}
        peer_name = "torch.distributed.all_reduce on new_group (gloo)"
        what = f"{elements * 4 / 2**20:.0f} MB of float32, Sum, process set {members}"
    seconds = _time_blocks(fns, calls, args.blocks, barriers, slowest)
    if case == "processset_allreduce":
        dist.barrier()
        hvd.remove_process_set(ps)
    return {
        "case": case, "ranks": n, "what": what, "peer": peer_name,
        "ringrun_ms": seconds["ringrun"] * 1e3, "peer_ms": seconds["peer"] * 1e3,
        "ringrun_steps_per_s": 1 / seconds["ringrun"], "ddp_steps_per_s": 1 / seconds["peer"],
        "ratio": seconds["peer"] / seconds["ringrun"],
    }
