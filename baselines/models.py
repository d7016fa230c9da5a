"""The default policies: an MLP actor and an MLP critic (CleanRL's layout and initialisation).

``ActorCritic(observation_size, action_space)`` works for ``Discrete`` (categorical),
``MultiDiscrete`` (one categorical per component) and ``Box`` (diagonal Gaussian, state-independent
log std) action spaces. A custom policy is any ``torch.nn.Module`` with the same two methods:
``value(obs) -> (B,)`` and ``action_and_value(obs, action=None) -> (action, log_prob, entropy, value)``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from gymnasium import spaces
from torch import nn


def layer(inputs: int, outputs: int, gain: float = math.sqrt(2)) -> nn.Linear:
    linear = nn.Linear(inputs, outputs)
    nn.init.orthogonal_(linear.weight, gain)
    nn.init.zeros_(linear.bias)
    return linear


def mlp(inputs: int, hidden: tuple[int, ...], outputs: int, last_gain: float) -> nn.Sequential:
    sizes = (inputs, *hidden)
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [layer(a, b), nn.Tanh()]
    return nn.Sequential(*layers, layer(sizes[-1], outputs, last_gain))


class ActorCritic(nn.Module):
    def __init__(self, observation_size: int, action_space: spaces.Space, hidden: tuple[int, ...] = (64, 64)):
        super().__init__()
        if isinstance(action_space, spaces.Discrete):
            self.nvec = [int(action_space.n)]
        elif isinstance(action_space, spaces.MultiDiscrete):
            self.nvec = [int(n) for n in np.asarray(action_space.nvec).ravel()]
        elif isinstance(action_space, spaces.Box):
            self.nvec = None
        else:
            raise TypeError(f"ActorCritic supports Discrete, MultiDiscrete and Box action spaces, got {action_space}")
        self.space = action_space
        self.critic = mlp(observation_size, hidden, 1, last_gain=1.0)
        outputs = sum(self.nvec) if self.nvec else int(np.prod(action_space.shape))
        self.actor = mlp(observation_size, hidden, outputs, last_gain=0.01)
        if self.nvec is None:
            self.log_std = nn.Parameter(torch.zeros(outputs))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def distribution(self, obs: torch.Tensor):
        out = self.actor(obs)
        if self.nvec is None:
            return torch.distributions.Normal(out, self.log_std.exp().expand_as(out))
        return [torch.distributions.Categorical(logits=logits) for logits in out.split(self.nvec, dim=-1)]

    def action_and_value(self, obs: torch.Tensor, action: torch.Tensor | None = None):
        dist = self.distribution(obs)
        if self.nvec is None:
            if action is None:
                action = dist.sample()
            log_prob, entropy = dist.log_prob(action).sum(-1), dist.entropy().sum(-1)
        else:
            parts = action.unsqueeze(-1) if len(self.nvec) == 1 and action is not None else action
            if action is None:
                parts = torch.stack([d.sample() for d in dist], dim=-1)
            log_prob = sum(d.log_prob(parts[..., i]) for i, d in enumerate(dist))
            entropy = sum(d.entropy() for d in dist)
            action = parts[..., 0] if isinstance(self.space, spaces.Discrete) else parts
        return action, log_prob, entropy, self.value(obs)

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        """The most likely action (the mean for Box spaces), for evaluation."""
        dist = self.distribution(obs)
        if self.nvec is None:
            return dist.mean
        parts = torch.stack([d.probs.argmax(-1) for d in dist], dim=-1)
        return parts[..., 0] if isinstance(self.space, spaces.Discrete) else parts
