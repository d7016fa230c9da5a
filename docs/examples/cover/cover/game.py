"""Cover-v0: ``N`` agents on a grid of cells ``0 .. L`` cover ``N`` landmarks, sharing one reward.

## Agents
One group, ``agents`` (``agent_0 .. agent_{N-1}``).

## Action space
Per agent ``Discrete(5)``: stay, ``+x``, ``-x``, ``+y``, ``-y`` (one cell, clipped to the grid).

## Observation space
Per agent ``Box(-1, 1, (2 + 4N,))`` float32: its own cell ``(x, y) / L``, then each landmark's
cell minus its own, ``/ L``, landmark by landmark, then each agent's likewise (its own: zeros).
Every ``/`` is one float32 division.

## Rewards
Every agent gets minus the share of landmarks left uncovered after the moves, ``(covered - N) / N``
(a landmark is covered when an agent stands on it): the sooner all are covered, the better.

## Starting state
Agents and landmarks on cells drawn from the env's key: agent ``a`` at draws ``(a, N + a)``,
landmark ``j`` at ``(2N + j, 3N + j)``, each ``min(floor(uniform(0, L + 1)), L)``.

## Episode end
Terminated when every landmark is covered; truncated after ``episode_length`` steps.
"""

from dataclasses import dataclass

import numpy as np
import torch
from gymnasium import spaces

from gpu_marl_envs import float32, rng
from gpu_marl_envs.envs.multi_agent import MultiAgentDefinition
from gpu_marl_envs.envs.params import param, params_dataclass


@params_dataclass  # frozen; checks each field's type and range; the kernels' constants come from it
class CoverParams:
    num_agents: int = param(3, ge=1)
    grid_length: int = param(4, ge=1)
    episode_length: int = param(25, ge=1)


@dataclass
class CoverState:
    x: torch.Tensor  # (E, N) int32: the agents' cells
    y: torch.Tensor
    landmark_x: torch.Tensor  # (E, N) int32: the landmarks' cells
    landmark_y: torch.Tensor
    t: torch.Tensor  # (E,) int32: steps since reset


def reset(p: CoverParams, key: torch.Tensor, num_envs: int) -> CoverState:
    draws = torch.arange(4 * p.num_agents, device=key.device)
    u = rng.uniform_from_key(key[:, None], draws, 0.0, float(p.grid_length + 1))
    x, y, landmark_x, landmark_y = torch.floor(u).to(torch.int32).clamp(max=p.grid_length).chunk(4, dim=1)
    return CoverState(
        x.contiguous(),
        y.contiguous(),
        landmark_x.contiguous(),
        landmark_y.contiguous(),
        torch.zeros(num_envs, dtype=torch.int32, device=key.device),
    )


def step(p: CoverParams, s: CoverState, actions: torch.Tensor):
    x = (s.x + (actions == 1).int() - (actions == 2).int()).clamp(0, p.grid_length)
    y = (s.y + (actions == 3).int() - (actions == 4).int()).clamp(0, p.grid_length)
    on = (x[:, :, None] == s.landmark_x[:, None, :]) & (y[:, :, None] == s.landmark_y[:, None, :])
    covered = on.any(dim=1).sum(dim=1)  # (E,) landmarks with an agent on them
    rewards = float32.divide(covered - p.num_agents, p.num_agents)[:, None].expand(-1, p.num_agents).contiguous()
    t = s.t + 1
    terminated = covered == p.num_agents
    truncated = (t >= p.episode_length) & ~terminated
    return CoverState(x, y, s.landmark_x, s.landmark_y, t), rewards, terminated, truncated


def observe(p: CoverParams, s: CoverState) -> dict[str, torch.Tensor]:
    own = torch.stack([s.x, s.y], dim=2)  # (E, N, 2)
    landmarks = torch.stack([s.landmark_x, s.landmark_y], dim=2)
    to_landmarks = landmarks[:, None, :, :] - own[:, :, None, :]  # (E, agent, landmark, 2)
    to_agents = own[:, None, :, :] - own[:, :, None, :]  # (E, agent, other agent, 2)
    cells = torch.cat([own, to_landmarks.flatten(2), to_agents.flatten(2)], dim=2)
    return {"agents": float32.divide(cells, p.grid_length)}


COVER = MultiAgentDefinition(
    id="Cover-v0",
    params_type=CoverParams,
    state_type=CoverState,
    observation_spaces=lambda p: {"agents": spaces.Box(-1.0, 1.0, (2 + 4 * p.num_agents,), np.float32)},
    action_spaces=lambda p: {"agents": spaces.Discrete(5)},
    reset=reset,
    step=step,
    observe=observe,
)
