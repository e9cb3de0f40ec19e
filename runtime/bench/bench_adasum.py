"""Adasum's time per call against ringrun's SUM allreduce of the same buffer, in the same run.

    ringrun -np 4 python3 runtime/bench/bench_adasum.py [MiB ...]     (default: 1 64)

Each size: float32 buffers, ringrun_allreduce in place in a C loop (the binding's time_allreduce,
the engine running, as for any program), SUM and ADASUM in alternating blocks after a warm-up;
the median block's time per call of the slowest rank. Rank 0 prints one row per size:
"MiB ranks transport sum_ms adasum_ms ratio" (ratio = adasum / sum).
"""

import array
import statistics
import sys
import time

from ringrun import _ringrun

BLOCKS = 5
BLOCK_SECONDS = 0.5


def slowest(seconds):
    """The largest value over the ranks (a MAX allreduce of one double)."""
    value = array.array('d', [seconds])
    address = value.buffer_info()[0]
    _ringrun.allreduce(address, address, 1, _ringrun.FLOAT64, _ringrun.MAX)
    return value[0]


def per_call(address, count, op, calls):
    return slowest(_ringrun.time_allreduce(address, count, _ringrun.FLOAT32, op, calls)) / calls


def main():
    sizes = [float(a) for a in sys.argv[1:]] or [1.0, 64.0]
    _ringrun.init()
    rank, ranks = _ringrun.rank(), _ringrun.size()
    if rank == 0:
        print(f'# MiB ranks transport sum_ms adasum_ms ratio ({BLOCKS} alternating blocks, median, slowest rank)')
    for mib in sizes:
        count = int(mib * (1 << 20)) // 4
        # A buffer per op: repeated sums grow to inf, which must not reach the Adasum's norms.
        initial = array.array('f', [((i * 7 + rank * 3) % 11 - 5) * 1e-3 for i in range(count)])
        buffers = {op: array.array('f', initial) for op in (_ringrun.SUM, _ringrun.ADASUM)}
        times = {}
        for op, data in buffers.items():
            start = time.perf_counter()
            per_call(data.buffer_info()[0], count, op, 2)  # warm-up: buffers, connections, the cache
            guess = max(1, int(BLOCK_SECONDS / max(slowest(time.perf_counter() - start) / 2, 1e-6)))
            times[op] = (guess, [])
        for _ in range(BLOCKS):
            for op, (calls, blocks) in times.items():
                blocks.append(per_call(buffers[op].buffer_info()[0], count, op, calls))
        sum_ms = statistics.median(times[_ringrun.SUM][1]) * 1e3
        adasum_ms = statistics.median(times[_ringrun.ADASUM][1]) * 1e3
        if rank == 0:
            print(f'{mib:g} {ranks} {_ringrun.transport_name()} {sum_ms:.3f} {adasum_ms:.3f} {adasum_ms / sum_ms:.2f}',
                  flush=True)
    _ringrun.finalize()


if __name__ == '__main__':
    main()
