# ringrun-test: np=3 timeout=90 direct
"""A failed slot is refilled by a new process that receives the state (ringrun.torch.elastic).

`ringrun -np 3 --min-np 2 --blacklist-cooldown-range 1 1` runs elastic_train.py (a 20 ms pause per
batch). The process with elastic id 1 SIGKILLs itself before its batch 5; the survivors roll back
to batch 4 and go on as 2 ranks; after the 1 s cooldown ringrun starts a new process (id 3) for a
world of 3. At their next commit the survivors raise HostsUpdatedInterrupt, re-form with it and
broadcast the state: the newcomer's train starts at their committed batch, and all three end with
identical parameters (the newcomer started from other random weights), equal to a single-process
replay; training goes on at least 4 batches in the grown world; ringrun exits 0; none left.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from elastic_train import check_final, events, launch  # noqa: E402


def main():
    status, lines, seconds = launch(3, ["--min-np", "2", "--blacklist-cooldown-range", "1", "1"], "refill", 16,
                                    0.02, timeout=60)
    out = "\n".join(lines)
    assert status == 0, (status, out)
    starts = {s["id"]: s for s in events(lines, "START")}
    assert sorted(starts) == [0, 1, 2, 3], ("id 3 is the refill; nobody else restarted", out)
    assert starts[3]["world"] >= 2 and starts[3]["size"] == 3, starts[3]
    assert events(lines, "DYING") == [{"id": 1, "batch": 5}], out
    trains = events(lines, "TRAIN")
    joined = [t for t in trains if t["id"] == 3]
    assert len(joined) == 1 and joined[0]["size"] == 3, (joined, out)
    for ident in (0, 2):
        mine = [t for t in trains if t["id"] == ident]
        assert [t["size"] for t in mine] == [3, 2, 3], (ident, mine, out)
        assert mine[1]["batch"] == 4, ("rolled back to the commit", mine)
        assert mine[2]["batch"] == joined[0]["batch"], ("the newcomer got the survivors' state", mine, joined)
        assert all(t["pid"] == starts[ident]["pid"] for t in mine), mine
    for ident in (0, 2):
        callbacks = [c["size"] for c in events(lines, "RESET_CB") if c["id"] == ident]
        assert callbacks == [2, 3], ("the reset callback runs once per new world", ident, callbacks)
    assert not [c for c in events(lines, "RESET_CB") if c["id"] == 3], "a newcomer has no reset"
    finals = events(lines, "FINAL")
    assert all(f["batch"] >= joined[0]["batch"] + 4 for f in finals), finals
    assert sorted(b["id"] for b in events(lines, "BYE")) == [0, 2, 3], out
    worst, steps = check_final(finals, [0, 2, 3], 3, lines, events(lines, "STEP"))
    print(f"refill: id 3 joined at batch {joined[0]['batch']} (world {starts[3]['world']}); 0, 2, 3 agree after "
          f"{steps} steps (replay within {worst:.2e}); {seconds:.1f} s")


if __name__ == "__main__":
    main()
