"""Puck-v0: a puck slides on a track; push it left or right to hold it at the middle.

## Action space
``Discrete(3)``: push left, don't push, push right (``force``).

## Observation space
``Box(2,)`` float32: the puck's position (within ``+-2 x_limit``) and velocity (within ``+-max_speed``).

## Rewards
``-|x|`` per step: the distance to the middle.

## Starting state
Position uniform in ``[-reset_bound, reset_bound)``, velocity 0.

## Episode end
Terminated when ``|x| > x_limit``; truncated after ``max_episode_steps`` steps.

## Step (float32, each operation rounded: the kernels' ``mul_rn``/``add_rn``)
``v <- clip(v + dt * force * (action - 1), -max_speed, max_speed)``, then ``x <- x + dt * v``.
"""

from dataclasses import dataclass

import numpy as np
import torch
from gymnasium import spaces

from gpu_marl_envs.envs.definition import EnvDefinition


@dataclass(frozen=True)
class PuckParams:
    dt: float = 0.05
    force: float = 1.0
    max_speed: float = 2.0
    x_limit: float = 1.0
    reset_bound: float = 0.5
    max_episode_steps: int = 200

    def __post_init__(self):
        for name in ("dt", "force", "max_speed", "x_limit", "reset_bound"):
            if not getattr(self, name) > 0:
                raise ValueError(f"PuckParams.{name} must be > 0, got {getattr(self, name)}")
        if self.dt * self.max_speed > self.x_limit:
            raise ValueError("PuckParams: one step may move the puck at most x_limit (dt * max_speed <= x_limit)")
        if self.max_episode_steps < 1:
            raise ValueError(f"PuckParams.max_episode_steps must be >= 1, got {self.max_episode_steps}")


def reset(p, uniform, num_envs: int) -> torch.Tensor:
    x = uniform(0, -p.reset_bound, p.reset_bound)
    return torch.stack([x, torch.zeros_like(x)])


def step(p, state: torch.Tensor, actions: torch.Tensor):
    x, v = state
    push = (actions - 1).to(torch.float32) * p.force
    v = (v + p.dt * push).clamp(-p.max_speed, p.max_speed)
    x = x + p.dt * v
    return torch.stack([x, v]), -x.abs(), x.abs() > p.x_limit


def observe(p, state: torch.Tensor) -> torch.Tensor:
    return state.T


PUCK = EnvDefinition(
    id="Puck-v0",
    params_type=PuckParams,
    state_fields=("x", "v"),
    kernel_params=("dt", "force", "max_speed", "x_limit", "reset_bound", "max_episode_steps"),
    observation_space=lambda p: spaces.Box(
        -np.array([2 * p.x_limit, p.max_speed], dtype=np.float32),
        np.array([2 * p.x_limit, p.max_speed], dtype=np.float32),
    ),
    action_space=lambda p: spaces.Discrete(3),
    reset=reset,
    step=step,
    observe=observe,
)
