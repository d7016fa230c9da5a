"""Glide-v0, a test game of Box actions with two groups: ``gliders`` and one ``leader`` glide on a
plane, each pushing with a 2-D ``Box(-1, 1)`` action.

Each step an agent's push, NaN read as 0 and clipped into ``[-1, 1]``, changes its velocity,
``v = damping * v + accel * push`` (each product rounded, then the sum), and its position,
``x = x + v``. Rewards: ``-(|x| + |y|)`` per agent. Observations: ``(x, y, vx, vy)``. Starts at
positions uniform in ``[-1, 1)`` (draws ``2a``, ``2a + 1`` of agent ``a``), at rest. Truncated
after ``episode_length`` steps; never terminated.
"""

from dataclasses import dataclass

import numpy as np
import torch
from gymnasium import spaces

from gpu_marl_envs import rng
from gpu_marl_envs.envs.multi_agent import MultiAgentDefinition, split_groups
from gpu_marl_envs.envs.params import param, params_dataclass


@params_dataclass
class GlideParams:
    num_gliders: int = param(3, ge=1)
    episode_length: int = param(5, ge=1)
    damping: float = param(0.5, ge=0, le=1)
    accel: float = param(0.25, gt=0)

    @property
    def num_agents(self) -> int:
        return self.num_gliders + 1


@dataclass
class GlideState:
    x: torch.Tensor  # (E, N) float32
    y: torch.Tensor
    vx: torch.Tensor
    vy: torch.Tensor
    t: torch.Tensor  # (E,) int32


def reset(p: GlideParams, key: torch.Tensor, num_envs: int) -> GlideState:
    draws = [rng.uniform_from_key(key, d, -1.0, 1.0) for d in range(2 * p.num_agents)]
    x, y = torch.stack(draws[0::2], dim=1), torch.stack(draws[1::2], dim=1)
    zeros = torch.zeros_like(x)
    return GlideState(x, y, zeros, zeros.clone(), torch.zeros(num_envs, dtype=torch.int32, device=key.device))


def step(p: GlideParams, s: GlideState, actions: torch.Tensor):
    push = actions.clamp(-1.0, 1.0)  # NaN is already 0
    vx = s.vx * p.damping + push[..., 0] * p.accel  # float32 values (params_dataclass)
    vy = s.vy * p.damping + push[..., 1] * p.accel
    x, y = s.x + vx, s.y + vy
    t = s.t + 1
    rewards = -(x.abs() + y.abs())
    terminated = torch.zeros_like(t, dtype=torch.bool)
    return GlideState(x, y, vx, vy, t), rewards, terminated, t >= p.episode_length


def observe(p: GlideParams, s: GlideState) -> dict[str, torch.Tensor]:
    return split_groups(groups(p), torch.stack([s.x, s.y, s.vx, s.vy], dim=2))


def action_spaces(p: GlideParams) -> dict[str, spaces.Box]:
    return {g: spaces.Box(-1.0, 1.0, (2,), np.float32) for g in ("gliders", "leaders")}


def groups(p: GlideParams) -> dict[str, range]:
    return {"gliders": range(p.num_gliders), "leaders": range(p.num_gliders, p.num_agents)}


GLIDE = MultiAgentDefinition(
    id="Glide-v0",
    params_type=GlideParams,
    state_type=GlideState,
    agent_groups=groups,
    observation_spaces=lambda p: {g: spaces.Box(-np.inf, np.inf, (4,), np.float32) for g in ("gliders", "leaders")},
    action_spaces=action_spaces,
    reset=reset,
    step=step,
    observe=observe,
)
