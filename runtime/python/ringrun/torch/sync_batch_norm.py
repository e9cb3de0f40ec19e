"""SyncBatchNorm: batch normalisation with statistics over the whole global batch (all ranks)."""

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from ringrun.torch.basics import Sum, size
from ringrun.torch.reduce_ops import allreduce

__all__ = ['SyncBatchNorm']


class SyncBatchNorm(_BatchNorm):
    """Batch normalisation whose training statistics cover the batches of all ranks, as
    ``horovod.torch.SyncBatchNorm``; a drop-in for ``torch.nn.BatchNorm1d/2d/3d``.

    In training (and whenever running statistics are not tracked) each forward pass allreduces
    the per-channel sum, sum of squares and count of every rank's batch (one allreduce per layer,
    in float64), normalises with the global mean and (biased) variance, and updates
    ``running_mean`` / ``running_var`` (unbiased) as torch's BatchNorm does. The backward pass
    allreduces the statistics' gradients, so input gradients equal those of one BatchNorm over
    the global batch; weight and bias gradients stay local (DistributedOptimizer reduces them).
    In eval mode, or with one rank, it is plain ``F.batch_norm``. CPU and CUDA tensors.

    Every rank must call forward (and backward) on each SyncBatchNorm layer the same number of
    times, in the same order. Arguments as ``torch.nn.BatchNorm2d``: num_features (C in
    (N, C, ...)), eps, momentum (None: cumulative average), affine, track_running_stats.
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError('SyncBatchNorm: expected at least 2D input (N, C, ...), got %dD input'
                             % input.dim())

    def forward(self, input):
        self._check_input_dim(input)
        batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        if not batch_stats or size() == 1:
            return super().forward(input)

        # The momentum of this update, as _BatchNorm.forward computes it.
        factor = 0.0 if self.momentum is None else self.momentum
        update = self.training and self.track_running_stats
        if update and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked)
        return self._sync_batch_norm(input, factor if update else None)

    def _sync_batch_norm(self, input, factor):
        channels = input.shape[1]
        if channels != self.num_features:
            raise ValueError('SyncBatchNorm: input has %d channels, the layer expects %d'
                             % (channels, self.num_features))
        dims = [0] + list(range(2, input.dim()))
        x = input.double()
        count = torch.full((1,), float(input.numel() // channels), dtype=torch.float64,
                           device=input.device)
        local = torch.cat([x.sum(dims), (x * x).sum(dims), count])
        # One differentiable allreduce: its backward sums the statistics' gradients over ranks.
        total = allreduce(local, op=Sum, name='sync_batch_norm.stats')
        n = float(total[-1].item())
        if n <= 1:
            raise ValueError('SyncBatchNorm: expected more than 1 value per channel when training '
                             'over all ranks, got input size %s' % (tuple(input.shape),))
        mean = total[:channels] / n
        var = (total[channels:2 * channels] / n - mean * mean).clamp(min=0.0)

        if factor is not None:
            with torch.no_grad():
                self.running_mean.mul_(1.0 - factor).add_(mean.detach().to(self.running_mean.dtype),
                                                          alpha=factor)
                unbiased = var.detach() * (n / (n - 1.0))
                self.running_var.mul_(1.0 - factor).add_(unbiased.to(self.running_var.dtype),
                                                         alpha=factor)

        shape = [1, channels] + [1] * (input.dim() - 2)
        scale = torch.rsqrt(var + self.eps)
        if self.weight is not None:
            scale = scale * self.weight.double()
        # Centre first: x * scale - mean * scale would lose digits when |mean| >> std.
        out = (input - mean.to(input.dtype).view(shape)) * scale.to(input.dtype).view(shape)
        if self.bias is not None:
            out = out + self.bias.view(shape)
        return out
