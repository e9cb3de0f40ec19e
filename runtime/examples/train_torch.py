"""Data-parallel training with ringrun.torch (Horovod's API): a small classifier on synthetic data.

    build/bin/ringrun -np 4 /usr/bin/python3 runtime/examples/train_torch.py
    /usr/bin/python3 runtime/examples/train_torch.py          # one process, no launcher

A Horovod script differs only in its import (``import horovod.torch as hvd``).
"""

import argparse

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import ringrun.torch as hvd


def synthetic_dataset(samples, features, classes):
    """Points around one random centre per class: learnable, and the same on every rank."""
    g = torch.Generator().manual_seed(1234)
    centres = torch.randn(classes, features, generator=g) * 0.6
    labels = torch.randint(classes, (samples,), generator=g)
    points = centres[labels] + torch.randn(samples, features, generator=g)
    return TensorDataset(points, labels)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--epochs', type=int, default=5)
    parser.add_argument('--batch-size', type=int, default=32, help='per rank')
    parser.add_argument('--lr', type=float, default=0.01, help='for one rank; scaled by size()')
    parser.add_argument('--fp16-allreduce', action='store_true', help='send gradients as float16')
    args = parser.parse_args()

    hvd.init()
    torch.manual_seed(42)
    torch.set_num_threads(1)  # ranks share the cores

    dataset = synthetic_dataset(2048, 16, 8)
    # Each rank reads its own 1/size() of every epoch.
    sampler = DistributedSampler(dataset, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    # The global batch grows with the ranks: scale the learning rate with it.
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)

    # Start every rank from rank 0's weights and optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression)

    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        model.train()
        total, count = 0.0, 0
        for points, labels in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(points), labels)
            loss.backward()
            optimizer.step()
            total += loss.item() * len(labels)
            count += len(labels)
        # This rank's mean loss, averaged over the ranks.
        avg_loss = hvd.allreduce(torch.tensor(total / count), name='avg_loss').item()
        with torch.no_grad():
            points, labels = dataset.tensors
            accuracy = (model(points).argmax(1) == labels).float().mean().item()
        if hvd.rank() == 0:
            print(f'epoch {epoch}: loss {avg_loss:.4f}  accuracy {accuracy:.3f}  ({hvd.size()} ranks)', flush=True)


if __name__ == '__main__':
    main()
