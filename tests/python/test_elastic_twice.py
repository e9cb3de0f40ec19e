# ringrun-test: np=3 timeout=90 direct
"""A second death while the world re-forms: ringrun.torch.elastic resets again.

`ringrun -np 3 --min-np 1` runs elastic_train.py; elastic id 1 SIGKILLs itself before its batch 5,
and id 2 SIGKILLs itself in its reset callback, after joining world 1 but before the state's sync.
Checked: id 0's sync fails, it restores again (RESTORE 4 -> 4), resets into a world of 1 and
finishes alone from the commit (batch 4), with parameters equal to a single-process replay;
ringrun reports both deaths and exits 0; no process is left.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from elastic_train import check_final, events, launch  # noqa: E402


def main():
    os.environ.update(ELASTIC_TRAIN_VICTIM="1", ELASTIC_TRAIN_DIE_IN_RESET="2")
    status, lines, seconds = launch(3, ["--min-np", "1"], "kill", 16, 0.0, timeout=40)
    out = "\n".join(lines)
    assert status == 0, (status, out)
    assert sum("ringrun: elastic:" in l and "signal 9" in l for l in lines) == 2, out
    assert events(lines, "DYING") == [{"id": 1, "batch": 5}, {"id": 2, "batch": 4}], out
    restores = [r for r in events(lines, "RESTORE") if r["id"] == 0]
    assert restores == [{"id": 0, "from": 5, "to": 4}, {"id": 0, "from": 4, "to": 4}], (restores, out)
    trains = [t for t in events(lines, "TRAIN") if t["id"] == 0]
    assert [(t["size"], t["batch"]) for t in trains] == [(3, 0), (1, 4)], (trains, out)
    assert [c["size"] for c in events(lines, "RESET_CB") if c["id"] == 0][-1] == 1, out
    assert [b["id"] for b in events(lines, "BYE")] == [0], out
    worst, steps = check_final(events(lines, "FINAL"), [0], 1, lines, events(lines, "STEP"))
    print(f"twice: id 0 went on alone after {steps} committed steps (replay within {worst:.2e}); {seconds:.1f} s")


if __name__ == "__main__":
    main()
