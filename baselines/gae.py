"""Generalised advantage estimation (Schulman et al., 2016, arXiv:1506.02438), batched over envs."""

from __future__ import annotations

import torch


def compute_gae(rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor, next_value: torch.Tensor,
                gamma: float, gae_lambda: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns ``(T, ...)`` from a rollout of ``T`` steps.

    ``rewards[t]``, ``values[t]`` = V(obs[t]) and ``dones[t]`` (the transition of step t ended its
    episode, so obs[t + 1] starts a new one) have shape ``(T, ...)``; ``next_value`` = V(obs[T]).
    A truncated episode is bootstrapped by the caller, who adds ``gamma * V(final observation)`` to
    its last reward: here an ended episode contributes nothing beyond its last step.
    """
    advantages = torch.empty_like(rewards)
    last = torch.zeros_like(next_value)
    not_done = 1.0 - dones.to(rewards.dtype)
    for t in reversed(range(rewards.shape[0])):
        following = next_value if t == rewards.shape[0] - 1 else values[t + 1]
        delta = rewards[t] + gamma * following * not_done[t] - values[t]
        last = delta + gamma * gae_lambda * not_done[t] * last
        advantages[t] = last
    return advantages, advantages + values
