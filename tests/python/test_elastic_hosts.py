# ringrun-test: np=4 timeout=120 direct
"""Elastic training on hosts the user named, as Horovod's elastic tests expect it.

`ringrun -np 2 --min-np 2 --reset-limit 1 -H localhost:2,127.0.0.1:2` runs elastic_train.py in
mode raise: elastic id 0 (on localhost) raises RuntimeError before its batch 5. Checked:
- the job starts on every slot of the -H hosts (4), not on -np's 2, as horovodrun does;
- each host keeps its name: ids 0 and 1 see HOROVOD_HOSTNAME=localhost, ids 2 and 3 127.0.0.1,
  though all four start here without ssh;
- the failure blacklists its host: id 1, localhost's other process, is removed and leaves with
  code 0, and ids 2 and 3 go on as a world of 2;
- an exception costs one reset, as a SIGKILL does: one elastic line, which names the failure and
  the blacklisting, and --reset-limit 1 lets the job go on;
- the survivors finish with the same parameters, equal to a single-process replay of the
  committed steps; ringrun exits 0 and leaves no process.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from elastic_train import check_final, events, launch  # noqa: E402


def main():
    os.environ["ELASTIC_TRAIN_VICTIM"] = "0"
    status, lines, seconds = launch(2, ["--min-np", "2", "--reset-limit", "1", "-H", "localhost:2,127.0.0.1:2"],
                                    "raise", 16, 0.0, timeout=90)
    out = "\n".join(lines)
    assert status == 0, (status, out)
    starts = {s["id"]: s for s in events(lines, "START")}
    assert sorted(starts) == [0, 1, 2, 3], ("every -H slot starts", out)
    assert {i: starts[i]["host"] for i in starts} == {0: "localhost", 1: "localhost", 2: "127.0.0.1",
                                                      3: "127.0.0.1"}, out
    elastic = [l for l in lines if l.startswith("ringrun: elastic:")]
    assert len(elastic) == 1, ("one reset for one failure", elastic)
    assert re.fullmatch(r"ringrun: elastic: rank 0 \(id 0, host localhost\) (is failing \(an error ended its "
                        r"training; host localhost is blacklisted\)|exited with code 1 \(host localhost is "
                        r"blacklisted\)); world 1 has 2 ranks(; id 1 is removed \(exiting at its next commit\))?",
                        elastic[0]), elastic[0]
    assert [l for l in events(lines, "LEFT") if l["id"] == 1] == [{"id": 1, "pid": starts[1]["pid"], "code": 0}], out
    finals = events(lines, "FINAL")
    worst, steps = check_final(finals, [2, 3], 2, lines, events(lines, "STEP"))
    print(f"-H localhost:2,127.0.0.1:2: id 0 raised, localhost blacklisted, ids 2, 3 agree after {steps} committed "
          f"steps (replay within {worst:.2e}); {seconds:.1f} s")


if __name__ == "__main__":
    main()
