"""ElasticSampler: a DistributedSampler that repartitions the rest of the epoch after a reset."""

import math
import random

import torch.utils.data

from ringrun.torch.basics import rank, size

__all__ = ['ElasticSampler']


class ElasticSampler(torch.utils.data.Sampler):
    """Partitions a dataset across the ranks like DistributedSampler, and after a reset (a rank
    lost or added) partitions only the samples not processed yet this epoch among the new ranks.

    Use it with ``ringrun.torch.elastic``:

    1. Put it in the ``TorchState`` (``TorchState(model, optimizer, sampler=sampler, ...)``): its
       position is committed, restored and broadcast with the rest of the state.
    2. Call ``record_batch(batch_idx, batch_size)`` after each batch (``batch_size`` per rank).
    3. Call ``set_epoch(epoch)`` at the *end* of each epoch: it clears the epoch's progress.

    Iterating it yields this rank's share of the remaining indices, padded (by repeating the first
    ones) to the same length on every rank.

    Args:
        dataset: the dataset (its length must not change).
        shuffle: shuffle the indices (the same order on every rank) each epoch (default True).
        seed: the shuffle's seed, the same on every rank; the epoch is added to it.
    """

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0  # samples processed this epoch, over all ranks
        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices = []
        self.num_samples = 0
        self.total_size = 0
        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch ``epoch``: a new shuffle, nothing processed yet. Call it at the end of an
        epoch, so that a reset inside an epoch does not process its samples twice."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Records one processed batch: ``batch_size`` samples on each of the size() ranks."""
        self.processed_num += batch_size * self.num_replicas

    def state_dict(self):
        return dict(epoch=self.epoch, processed_num=self.processed_num)

    def load_state_dict(self, state_dict):
        self.epoch = state_dict['epoch']
        self.processed_num = state_dict['processed_num']
        self.reset()

    def reset(self):
        """Re-reads rank() and size() and repartitions the samples not processed yet."""
        self.num_replicas = size()
        self.rank = rank()
        indices = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(indices)
        self.remaining_indices = indices[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        indices = self.remaining_indices[:]
        while indices and len(indices) < self.total_size:
            indices += indices[:self.total_size - len(indices)]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples
