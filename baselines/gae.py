"""Generalised advantage estimation (Schulman et al., 2016, arXiv:1506.02438), batched over envs."""

from __future__ import annotations

import torch


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    next_value: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns ``(T, ...)`` from a rollout of ``T`` steps.

    ``rewards[t]``, ``values[t]`` = V(obs[t]) and ``dones[t]`` (the transition of step t ended its
    episode, so obs[t + 1] starts a new one) have shape ``(T, ...)``; ``next_value`` = V(obs[T]).
    A truncated episode is bootstrapped by the caller, who adds ``gamma * V(final observation)`` to
    its last reward: here an ended episode contributes nothing beyond its last step.
    """
    # The TD errors of every step at once; then the recursion A[t] = delta[t] + gamma * lambda *
    # (1 - done[t]) * A[t + 1] runs backwards, two small kernels per step (not eight) in a captured
    # update. (A multiply and an add rather than addcmul: a fused multiply-add would round
    # differently from the plain loop that the tests compare with.)
    not_done = 1.0 - dones.to(rewards.dtype)
    following = torch.cat([values[1:], next_value.unsqueeze(0)])
    deltas = rewards + gamma * following * not_done - values
    decay = (gamma * gae_lambda) * not_done
    advantages = torch.empty_like(rewards)
    advantages[-1] = deltas[-1]
    for t in reversed(range(rewards.shape[0] - 1)):
        torch.add(deltas[t], decay[t] * advantages[t + 1], out=advantages[t])
    return advantages, advantages + values
