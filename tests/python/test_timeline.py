# ringrun-test: np=2 timeout=90 direct
"""The timeline of a Python run names the parameters: DistributedOptimizer's allreduces go
through the engine under each parameter's name, and rank 0 writes them to --timeline-filename.

This script is the driver: it runs ringrun on the worker below (this file with --worker)."""
import json
import os
import subprocess
import sys
import tempfile


def worker():
    import torch

    import ringrun.torch as hvd

    hvd.init()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(4, 8)).pow(2).mean().backward()
        optimizer.step()
    hvd.shutdown()


def driver():
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "timeline.json")
        run = subprocess.run([os.environ["RINGRUN"], "-np", "2", "--timeline-filename", path, sys.executable,
                              __file__, "--worker"], capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, (run.returncode, run.stdout, run.stderr)
        with open(path) as f:
            text = f.read()
        events = json.loads(text if text.rstrip().endswith("]") else text.rstrip().rstrip(",") + "]")
        found = [p for p in ("0.weight", "0.bias", "2.weight", "2.bias") if f'"{p}"' in text]
        assert found == ["0.weight", "0.bias", "2.weight", "2.bias"], (found, text[:2000])
        print(f"timeline: {len(events)} events naming {found}")


if __name__ == "__main__":
    worker() if "--worker" in sys.argv else driver()
