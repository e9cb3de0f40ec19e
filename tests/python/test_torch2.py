# ringrun-test: np=2 timeout=240
"""What torch 2.x adds, under DistributedOptimizer: a torch.compile'd model trains to the same
parameters as the same model in eager mode; bf16 autocast with fp16 and bf16 gradient compression
trains like DDP-style averaging of the same gradients; gradients are hooked after accumulation
(register_post_accumulate_grad_hook). On torch 1.13 (Debian's) only the hook part runs."""
import os

import torch

import ringrun.torch as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()
torch.set_num_threads(1)
TORCH2 = int(torch.__version__.split(".")[0]) >= 2


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))


def batch(step):
    g = torch.Generator().manual_seed(100 + step * N + R)  # each rank its own slice
    return torch.randn(6, 8, generator=g), torch.randn(6, 4, generator=g)


def train(model, steps=4, compression=hvd.Compression.none, autocast=False, forward=None):
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                   named_parameters=model.named_parameters(), compression=compression)
    forward = forward or model
    for step in range(steps):
        x, y = batch(step)
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = ((forward(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def same_everywhere(flat, what):
    every = hvd.allgather(flat.unsqueeze(0), name=f"check.{what}")
    assert torch.equal(every, every[0].expand_as(every)), f"{what}: parameters differ across ranks"


eager = train(make_model())
same_everywhere(eager, "eager")
hooked = 'register_post_accumulate_grad_hook' in dir(torch.Tensor)
assert hooked == TORCH2 or torch.__version__.startswith("2.0"), torch.__version__

if TORCH2:
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    model = make_model()
    compiled = torch.compile(model)
    flat = train(model, forward=compiled)
    same_everywhere(flat, "compiled")
    diff = (flat - eager).abs().max().item()
    assert diff < 1e-5, f"torch.compile under DistributedOptimizer differs from eager by {diff}"

    for name, compression, tol in (("fp16", hvd.Compression.fp16, 2e-2), ("bf16", hvd.Compression.bf16, 5e-2)):
        flat = train(make_model(), compression=compression, autocast=True)
        same_everywhere(flat, f"autocast.{name}")
        diff = (flat - eager).abs().max().item()
        assert diff < tol, f"bf16 autocast with {name} compression is {diff} from float32 eager"
hvd.shutdown()
print(f"rank {R}: torch {torch.__version__} ok (compile and autocast: {TORCH2})")
