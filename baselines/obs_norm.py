"""Observations normalised by their running mean and variance, as Stable-Baselines3's
``VecNormalize`` and Gymnasium's ``NormalizeObservation`` do, but kept inside the policy: the
statistics are buffers of the module (saved in checkpoints with the weights) and are updated on the
device from each rollout, within a captured update.

Why: features of very different scales otherwise reach the first layer unscaled. In
CovidEconomy-v0, a governor's infected and dead shares of its state's population are of the order
of 1e-3 and 1e-4 next to a one-hot of 51 ones and zeros. (Normalising them did not change what the
PPO runs of ``docs/covid_economy.md`` converge to.)

The update merges a batch's moments into the running ones with Chan, Golub and LeVeque's formula
(1979), the one SB3's ``RunningMeanStd`` uses, in float64. Normalised features are clipped to
``[-clip, clip]`` (SB3's ``clip_obs``, 10).

The multi-agent trainer's ``normalize_values`` keeps the returns' statistics in one of these too
(one feature, no clipping): its critic predicts normalised returns, and :meth:`restore` maps them back.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


class ObservationNormalizer(nn.Module):
    def __init__(self, size: int, clip: float = 10.0, eps: float = 1e-8):
        super().__init__()
        self.clip, self.eps = clip, eps
        self.register_buffer("mean", torch.zeros(size, dtype=torch.float64))
        self.register_buffer("var", torch.ones(size, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        scaled = (obs - self.mean.to(obs.dtype)) * torch.rsqrt(self.var + self.eps).to(obs.dtype)
        return scaled.clamp(-self.clip, self.clip)

    def restore(self, scaled: torch.Tensor) -> torch.Tensor:
        """The inverse of :meth:`forward` (unclipped): ``scaled * std + mean``, in ``scaled``'s dtype."""
        return scaled * torch.sqrt(self.var + self.eps).to(scaled.dtype) + self.mean.to(scaled.dtype)

    @torch.no_grad()
    def update(
        self,
        obs: torch.Tensor,
        weights: torch.Tensor | None = None,
        sum_over_ranks: Callable[[torch.Tensor], None] | None = None,
    ) -> None:
        """Merge the rows of ``obs`` (``(..., size)``) into the statistics, each row counted with its
        ``weights`` (``obs.shape[:-1]``; rows of weight 0, e.g. agents out of their game, are left
        out). ``sum_over_ranks(t)``, where several processes train together, sums ``t`` in place over
        them, so that every rank merges the same moments. No host synchronisation."""
        rows = obs.reshape(-1, obs.shape[-1]).double()
        w = (
            torch.ones(len(rows), dtype=torch.float64, device=rows.device)
            if weights is None
            else weights.reshape(-1).double()
        )
        # One tensor of sums, so that ranks add them up in one collective: count, sum, sum of squares.
        sums = torch.cat((w.sum().view(1), w @ rows, w @ (rows * rows)))
        if sum_over_ranks is not None:
            sum_over_ranks(sums)
        size = rows.shape[1]
        n, total, squares = sums[0], sums[1 : size + 1], sums[size + 1 :]
        batch_mean = total / n.clamp(min=1)
        batch_var = (squares / n.clamp(min=1) - batch_mean * batch_mean).clamp(min=0)
        count = self.count + n
        delta = batch_mean - self.mean
        fraction = n / count.clamp(min=1)
        # An empty batch (n = 0) leaves the statistics as they are: fraction 0.
        self.var.copy_(self.var * (1 - fraction) + batch_var * fraction + delta * delta * fraction * (1 - fraction))
        self.mean.add_(delta * fraction)
        self.count.copy_(count)
