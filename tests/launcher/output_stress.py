"""Output stress for every backend (README, Using it: each line whole): each rank writes lines of
10 B to 5 KiB, cut into partial writes with pauses between (so srun and mpirun read a line in
pieces), with bytes that look like launcher tags ('[1,3]<stdout>:', '3: ', '%0A'), to stdout and
stderr interleaved, a burst of tiny lines, and a last line without a newline on each stream.

  output_stress.py emit LINES            (run as a rank: RANK in the environment)
  output_stress.py check OUT ERR RANKS LINES
The check exits 1 naming the first line that is not exactly '[RANK]<stream>:' + a line the rank
wrote, and any line that is missing or out of order.
"""
import os
import random
import re
import sys
import time

SIZES = [10, 200, 1100, 5000, 40]
SHORT = 1000


def lines_of(rank, count):
    """(stream, bytes without newline) in the order rank `rank` writes them."""
    out = []
    for i in range(count):
        size = SIZES[i % len(SIZES)]
        head = f"rank {rank} line {i} [1,{rank}]<stdout>: 3: %0A\t\u00e9 "
        body = "".join(chr(ord("a") + (rank + i + k) % 26) for k in range(size))
        out.append((2 if i % 5 == 2 else 1, (head + body).encode()))
    for k in range(SHORT):  # many short lines at once: mpirun's --tag-output drops some of these
        out.append((1, f"r{rank}s{k}".encode()))
    return out


def emit(count):
    rank = int(os.environ["RANK"])
    rng = random.Random(rank)
    burst = b""
    for stream, line in lines_of(rank, count):
        data = line + b"\n"
        if line.startswith(b"r%ds" % rank):
            burst += data
            continue
        cuts = sorted(rng.sample(range(1, len(data)), min(2, len(data) - 1)))
        pieces = [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]
        for n, piece in enumerate(pieces):
            os.write(stream, piece)
            if n + 1 < len(pieces) and rng.random() < 0.1:
                time.sleep(0.002)
    os.write(1, burst)
    os.write(2, b"rank %d stderr end" % rank)
    os.write(1, b"rank %d stdout end" % rank)


def check(out_path, err_path, ranks, count):
    tag = re.compile(rb"^\[(\d+)\]<(stdout|stderr)>:(.*)$", re.S)
    for stream, path in ((1, out_path), (2, err_path)):
        name = "stdout" if stream == 1 else "stderr"
        got = {r: [] for r in range(ranks)}
        with open(path, "rb") as f:
            for number, line in enumerate(f.read().split(b"\n")[:-1], 1):
                m = tag.match(line)
                if not m or m.group(2).decode() != name or int(m.group(1)) not in got:
                    if stream == 2 and line.startswith((b"ringrun:", b"[srun]<stderr>:", b"[mpirun]<stderr>:")):
                        continue  # ringrun's and the launcher's own notes
                    sys.exit(f"{name} line {number} is not one tagged line of a rank: {line[:300]!r}")
                got[int(m.group(1))].append(m.group(3))
        for r in range(ranks):
            want = [line for s, line in lines_of(r, count) if s == stream]
            want.append(b"rank %d %s end" % (r, name.encode()))
            if got[r] != want:
                bad = next((k for k, (a, b) in enumerate(zip(got[r], want)) if a != b), min(len(got[r]), len(want)))
                sys.exit(f"rank {r} {name}: {len(got[r])} lines, want {len(want)}; first difference at line {bad}: "
                         f"got {got[r][bad][:200] if bad < len(got[r]) else None!r}, "
                         f"want {want[bad][:200] if bad < len(want) else None!r}")
    print(f"output_stress: {ranks} ranks x {count} lines + {SHORT} short lines, every line whole and tagged once")


if __name__ == "__main__":
    if sys.argv[1] == "emit":
        emit(int(sys.argv[2]))
    else:
        check(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
