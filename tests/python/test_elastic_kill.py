# ringrun-test: np=3 timeout=90 direct
"""Elastic training survives a SIGKILLed worker (ringrun.torch.elastic, Horovod's example shape).

`ringrun -np 3 --min-np 2` runs elastic_train.py: TorchState(model, DistributedOptimizer,
ElasticSampler, epoch, batch), @hvd.elastic.run, commit every 2 batches. One process SIGKILLs
itself before its batch 5 (last commit: 4): elastic id 1, then (second run) id 0, rank 0, whose
successor must broadcast the state. Checked: the survivors roll back to batch 4 (RESTORE 5 -> 4),
run the reset callback once and re-enter train in a world of size 2 with the same pids; they
finish with identical parameters, equal to a single-process replay of the committed steps (and
across both runs); ringrun names the death and exits 0; every survivor exits through
ringrun.torch's shutdown; no process is left.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from elastic_train import TIMELINE, check_final, events, launch  # noqa: E402


def run(victim):
    os.environ["ELASTIC_TRAIN_VICTIM"] = str(victim)
    status, lines, seconds = launch(3, ["--min-np", "2"], "kill", 16, 0.0, timeout=40)
    # Kept in the test's output: when each line came (a stall shows as a gap).
    print(f"kill id {victim}: timeline\n" + "\n".join(TIMELINE), flush=True)
    out = "\n".join(lines)
    survivors = [i for i in (0, 1, 2) if i != victim]
    assert status == 0, (status, out)
    assert any(f"rank {victim} (id {victim}" in l and "signal 9" in l for l in lines), out
    starts = {s["id"]: s for s in events(lines, "START")}
    assert sorted(starts) == [0, 1, 2], ("one start per process, no restart", out)
    assert events(lines, "DYING") == [{"id": victim, "batch": 5}], out
    for ident in survivors:
        restores = [r for r in events(lines, "RESTORE") if r["id"] == ident]
        assert restores == [{"id": ident, "from": 5, "to": 4}], (ident, restores, out)
        trains = [t for t in events(lines, "TRAIN") if t["id"] == ident]
        assert [(t["size"], t["batch"]) for t in trains] == [(3, 0), (2, 4)], (ident, trains, out)
        assert trains[1]["world"] >= 1 and trains[1]["pid"] == starts[ident]["pid"], (trains, starts)
        callbacks = [c["size"] for c in events(lines, "RESET_CB") if c["id"] == ident]
        assert callbacks == [2], ("the reset callback runs once per new world", ident, callbacks)
    assert sorted(b["id"] for b in events(lines, "BYE")) == survivors, out
    finals = events(lines, "FINAL")
    assert all(f["pid"] == starts[f["id"]]["pid"] and f["batch"] == 16 for f in finals), finals
    worst, steps = check_final(finals, survivors, 2, lines, events(lines, "STEP"))
    print(f"kill id {victim}: survivors {survivors} agree after {steps} committed steps "
          f"(replay within {worst:.2e}); {seconds:.1f} s")
    return [float(v) for v in finals[0]["params"].split(",")]


def main():
    first, second = run(1), run(0)
    worst = max(abs(a - b) for a, b in zip(first, second))
    assert worst < 1e-5, ("the same committed history gives the same parameters", worst)


if __name__ == "__main__":
    main()
