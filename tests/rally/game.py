"""Rally-v0: ``N`` agents on a square plane ``[-bound, bound]^2`` gather, each paid for the agents near it.

## Agents
One group, ``agents`` (``agent_0 .. agent_{N-1}``).

## Action space
Per agent ``MultiDiscrete([3, 3])``, one index per axis: stay, ``+speed``, ``-speed`` (``MOVES``).

## Observation space
Per agent ``Box(-2 bound, 2 bound, (2 + 2N,))`` float32: its own ``(x, y)``, then each agent's
``(x, y)`` minus its own, agent by agent (its own: zeros).

## Rewards
Each agent gets the share of agents (itself included) within ``radius`` of it on both axes
(``|dx| <= radius`` and ``|dy| <= radius``, after the moves): ``count / N``, one float32 division.

## Starting state
Positions uniform in ``[-bound, bound)``: agent ``a``'s ``x`` at draw ``2a``, its ``y`` at ``2a + 1``.

## Episode end
Terminated when every agent has every other near it; truncated after ``episode_length`` steps.

## Step (float32)
``x <- clip(x + MOVES[i], -bound, bound)``, one addition, per axis.
"""

from dataclasses import dataclass

import numpy as np
import torch
from gymnasium import spaces

from gpu_marl_envs import float32, rng
from gpu_marl_envs.envs.multi_agent import MultiAgentDefinition
from gpu_marl_envs.envs.params import param, params_constants, params_dataclass


@params_dataclass
class RallyParams:
    num_agents: int = param(3, ge=1)
    episode_length: int = param(20, ge=1)
    speed: float = param(0.25, gt=0)
    bound: float = param(1.0, gt=0)
    radius: float = param(0.5, ge=0)


@dataclass
class RallyState:
    x: torch.Tensor  # (E, N) float32
    y: torch.Tensor
    t: torch.Tensor  # (E,) int32: steps since reset


def moves(p: RallyParams) -> tuple[float, float, float]:
    """Each action index's move along its axis (a tuple constant of both kernels)."""
    return (0.0, p.speed, -p.speed)


def reset(p: RallyParams, key: torch.Tensor, num_envs: int) -> RallyState:
    draws = [rng.uniform_from_key(key, d, -p.bound, p.bound) for d in range(2 * p.num_agents)]
    x, y = torch.stack(draws[0::2], dim=1), torch.stack(draws[1::2], dim=1)
    return RallyState(x, y, torch.zeros(num_envs, dtype=torch.int32, device=key.device))


def step(p: RallyParams, s: RallyState, actions: torch.Tensor):
    move = torch.tensor(moves(p), dtype=torch.float32, device=s.x.device)[actions]  # (E, N, 2)
    x = (s.x + move[..., 0]).clamp(-p.bound, p.bound)
    y = (s.y + move[..., 1]).clamp(-p.bound, p.bound)
    near = ((x[:, :, None] - x[:, None, :]).abs() <= p.radius) & ((y[:, :, None] - y[:, None, :]).abs() <= p.radius)
    count = near.sum(dim=2)  # (E, N)
    t = s.t + 1
    terminated = (count == p.num_agents).all(dim=1)
    truncated = (t >= p.episode_length) & ~terminated
    return RallyState(x, y, t), float32.divide(count, p.num_agents), terminated, truncated


def observe(p: RallyParams, s: RallyState) -> dict[str, torch.Tensor]:
    own = torch.stack([s.x, s.y], dim=2)  # (E, N, 2)
    others = own[:, None, :, :] - own[:, :, None, :]  # (E, agent, other agent, 2)
    return {"agents": torch.cat([own, others.flatten(2)], dim=2)}


RALLY = MultiAgentDefinition(
    id="Rally-v0",
    params_type=RallyParams,
    state_type=RallyState,
    observation_spaces=lambda p: {"agents": spaces.Box(-2 * p.bound, 2 * p.bound, (2 + 2 * p.num_agents,), np.float32)},
    action_spaces=lambda p: {"agents": spaces.MultiDiscrete([3, 3])},
    reset=reset,
    step=step,
    observe=observe,
    kernel_constants=lambda p: params_constants(p, MOVES=moves(p)),
)
