"""The default policies: an MLP actor and an MLP critic (CleanRL's layout and initialisation).

``ActorCritic(observation_size, action_space)`` works for ``Discrete`` (categorical),
``MultiDiscrete`` (one categorical per component) and ``Box`` (diagonal Gaussian, state-independent
log std) action spaces. A custom policy is any ``torch.nn.Module`` with the same three methods:
``sample(obs) -> action``, ``value(obs) -> (B,)`` and
``action_and_value(obs, action=None) -> (action, log_prob, entropy, value)``; to be captured in a
CUDA graph they must not synchronise with the host (no ``.item()``, no ``torch.distributions``
argument validation).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


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
        # Components of one size (Tag's two moves) are handled as one (..., components, n) tensor.
        self.uniform = self.nvec is not None and len(set(self.nvec)) == 1
        self.critic = mlp(observation_size, hidden, 1, last_gain=1.0)
        outputs = sum(self.nvec) if self.nvec else int(np.prod(action_space.shape))
        self.actor = mlp(observation_size, hidden, outputs, last_gain=0.01)
        if self.nvec is None:
            self.log_std = nn.Parameter(torch.zeros(outputs))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    # The distributions are written out rather than taken from torch.distributions: its argument
    # validation synchronises with the host, and sampling must stay capturable in a CUDA graph.
    def sample(self, obs: torch.Tensor) -> torch.Tensor:
        """An action drawn from the policy (the rollout's only use of the networks)."""
        out = self.actor(obs).float()  # the noise in float32, also where the network ran in bfloat16
        if self.nvec is None:
            return out + self.log_std.exp() * torch.randn_like(out)
        # Gumbel-max: argmax(logits + Gumbel noise) is a draw from the categorical of the logits;
        # the noise of every component is drawn at once.
        return self._argmax(out - torch.rand_like(out).log().neg().log())

    def action_and_value(self, obs: torch.Tensor, action: torch.Tensor | None = None):
        """``(action, log_prob, entropy, value)``; the action is drawn where none is given."""
        if action is None:
            action = self.sample(obs)
        out = self.actor(obs)
        if self.nvec is None:
            log_std = self.log_std.expand_as(out)
            log_prob = (-0.5 * ((action - out) / log_std.exp()) ** 2 - log_std - HALF_LOG_2PI).sum(-1)
            entropy = (0.5 + HALF_LOG_2PI + log_std).sum(-1)
            return action, log_prob, entropy, self.value(obs)
        parts = action.unsqueeze(-1) if isinstance(self.space, spaces.Discrete) else action
        if self.uniform:
            log_probs = out.unflatten(-1, (len(self.nvec), self.nvec[0])).log_softmax(-1)
            log_prob = log_probs.gather(-1, parts.unsqueeze(-1)).sum((-2, -1))
            entropy = -(log_probs.exp() * log_probs).sum((-2, -1))
            return action, log_prob, entropy, self.value(obs)
        log_probs = [logits.log_softmax(-1) for logits in out.split(self.nvec, dim=-1)]
        log_prob = sum(lp.gather(-1, parts[..., i:i + 1]).squeeze(-1) for i, lp in enumerate(log_probs))
        entropy = sum(-(lp.exp() * lp).sum(-1) for lp in log_probs)
        return action, log_prob, entropy, self.value(obs)

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        """The most likely action (the mean for Box spaces), for evaluation."""
        out = self.actor(obs)
        return out if self.nvec is None else self._argmax(out)

    def _argmax(self, scores: torch.Tensor) -> torch.Tensor:
        """The index of the largest score of each component: the action."""
        if isinstance(self.space, spaces.Discrete):
            return scores.argmax(-1)
        if self.uniform:
            return scores.unflatten(-1, (len(self.nvec), self.nvec[0])).argmax(-1)
        return torch.stack([part.argmax(-1) for part in scores.split(self.nvec, dim=-1)], dim=-1)
