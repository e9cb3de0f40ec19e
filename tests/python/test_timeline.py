# ringrun-test: np=2 timeout=120 direct
"""The timeline of a Python run: DistributedOptimizer's allreduces go through the engine under each
parameter's name (Horovod's "allreduce.<name>"), and rank 0 writes them with Horovod's event names
(NEGOTIATE_ALLREDUCE, ALLREDUCE, CYCLE_START) to --timeline-filename, to HOROVOD_TIMELINE when a
migrated job's environment sets it, or between start_timeline() and stop_timeline() at run time
(HOROVOD_TIMELINE=DYNAMIC). Each file is valid JSON.

This script is the driver: it runs ringrun on the worker below (this file with --worker MODE)."""
import json
import os
import subprocess
import sys
import tempfile
import time


def worker(mode, path):
    import torch

    import ringrun.torch as hvd

    hvd.init()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    for step in range(3):
        if mode == "dynamic" and step == 1:
            hvd.start_timeline(path, mark_cycles=True)
        optimizer.zero_grad()
        model(torch.randn(4, 8)).pow(2).mean().backward()
        optimizer.step()
    if mode == "dynamic":
        hvd.allreduce(torch.ones(3), name="test_allreduce")
        time.sleep(0.2)
        hvd.stop_timeline()
        hvd.allreduce(torch.ones(3), name="after_stop")
    hvd.shutdown()


def read(path):
    with open(path) as f:
        text = f.read()
    return json.loads(text), text


def run(mode, path, flags=(), env=None):
    run = subprocess.run([os.environ["RINGRUN"], "-np", "2", *flags, sys.executable, __file__, "--worker", mode, path],
                         capture_output=True, text=True, timeout=90, env=env)
    assert run.returncode == 0, (mode, run.returncode, run.stdout, run.stderr)


def driver():
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "timeline.json")
        run("flag", path, ["--timeline-filename", path, "-x", "RINGRUN_TIMELINE_MARK_CYCLES=1"])
        events, text = read(path)
        found = [p for p in ("0.weight", "0.bias", "2.weight", "2.bias") if f'"allreduce.{p}"' in text]
        assert found == ["0.weight", "0.bias", "2.weight", "2.bias"], (found, text[:2000])
        for name in ("NEGOTIATE_ALLREDUCE", "ALLREDUCE", "CYCLE_START", "start_time_since_epoch_in_micros"):
            assert name in text, (name, text[:2000])

        horovod = os.path.join(tmp, "horovod.json")
        env = dict(os.environ, HOROVOD_TIMELINE=horovod, HOROVOD_TIMELINE_MARK_CYCLES="1")
        run("env", path, env=env)
        _, text = read(horovod)
        assert '"allreduce.0.weight"' in text and "CYCLE_START" in text, text[:2000]

        dynamic = os.path.join(tmp, "dynamic.json")
        run("dynamic", dynamic, env=dict(os.environ, HOROVOD_TIMELINE="DYNAMIC"))
        _, text = read(dynamic)
        assert '"allreduce.test_allreduce"' in text and "CYCLE_START" in text, text[:2000]
        assert "after_stop" not in text, "an op after stop_timeline() is in the timeline"
        print(f"timeline: {len(events)} events naming {found}; HOROVOD_TIMELINE and start/stop_timeline too")


if __name__ == "__main__":
    worker(sys.argv[2], sys.argv[3]) if "--worker" in sys.argv else driver()
