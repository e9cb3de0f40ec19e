# ringrun-test: np=3 timeout=90 direct
"""SIGTERM makes an elastic worker leave gracefully at its next commit (ringrun.torch.elastic).

`ringrun -np 3 --min-np 2` runs elastic_train.py (a 30 ms pause per batch); once training runs,
this driver sends SIGTERM to the process with elastic id 2 (by the pid it printed). Checked: it
leaves through SystemExit(0) (LEFT code=0) at a commit; the others see a host update, not a
failure: no rollback (no RESTORE), the same pids, train re-entered at an even (committed) batch
in a world of size 2, identical final parameters equal to a single-process replay; ringrun reports
the leave and exits 0; no process is left.
"""
import os
import re
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from elastic_train import check_final, events, launch  # noqa: E402


def main():
    seen = {"pid": None, "steps": 0, "sent": False}

    def on_line(line):
        m = re.search(r"TRAIN id=2 pid=(\d+)", line)
        if m:
            seen["pid"] = int(m.group(1))
        if " STEP " in line or "STEP e=" in line:
            seen["steps"] += 1
        if seen["pid"] and seen["steps"] >= 4 and not seen["sent"]:
            seen["sent"] = True
            os.kill(seen["pid"], signal.SIGTERM)

    status, lines, seconds = launch(3, ["--min-np", "2"], "leave", 40, 0.03, timeout=60, on_line=on_line)
    out = "\n".join(lines)
    assert seen["sent"], ("SIGTERM was never sent", out)
    assert status == 0, (status, out)
    assert events(lines, "LEFT") == [{"id": 2, "pid": seen["pid"], "code": 0}], out
    assert sorted(b["id"] for b in events(lines, "BYE")) == [0, 1, 2], ("every process exits cleanly", out)
    assert not events(lines, "RESTORE"), ("a leave is no failure: no rollback", out)
    assert not events(lines, "DYING"), out
    assert any("ringrun: elastic:" in l and "leav" in l for l in lines), out
    starts = {s["id"]: s for s in events(lines, "START")}
    assert sorted(starts) == [0, 1, 2], out
    for ident in (0, 1):
        trains = [t for t in events(lines, "TRAIN") if t["id"] == ident]
        assert [t["size"] for t in trains] == [3, 2], (ident, trains, out)
        assert trains[1]["batch"] % 2 == 0 and trains[1]["batch"] > 0, ("re-entered at a commit", trains)
        assert trains[1]["pid"] == starts[ident]["pid"], trains
    for ident in (0, 1):
        callbacks = [c["size"] for c in events(lines, "RESET_CB") if c["id"] == ident]
        assert callbacks == [2], ("the reset callback runs once per new world", ident, callbacks)
    finals = events(lines, "FINAL")
    assert all(f["pid"] == starts[f["id"]]["pid"] and f["batch"] == 40 for f in finals), finals
    worst, steps = check_final(finals, [0, 1], 2, lines, events(lines, "STEP"))
    left_at = [t for t in events(lines, "TRAIN") if t["id"] == 0][1]["batch"]
    print(f"leave: id 2 left at batch {left_at}; 0 and 1 agree after {steps} steps (replay within {worst:.2e}); "
          f"{seconds:.1f} s")


if __name__ == "__main__":
    main()
