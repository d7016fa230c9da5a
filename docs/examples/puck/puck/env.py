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

import numpy as np
import torch
from gymnasium import spaces

from gpu_marl_envs.envs.definition import EnvDefinition
from gpu_marl_envs.envs.params import param, params_dataclass


@params_dataclass  # frozen; checks each field's type and range; the kernels' params are its fields
class PuckParams:
    dt: float = param(0.05, gt=0)
    force: float = param(1.0, gt=0)
    max_speed: float = param(2.0, gt=0)
    x_limit: float = param(1.0, gt=0)
    reset_bound: float = param(0.5, gt=0)
    max_episode_steps: int = param(200, ge=1)

    def __post_init__(self):  # what a range cannot say, after the ranges are checked
        if self.dt * self.max_speed > self.x_limit:
            raise ValueError("PuckParams: one step may move the puck at most x_limit (dt * max_speed <= x_limit)")


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
    observation_space=lambda p: spaces.Box(
        -np.array([2 * p.x_limit, p.max_speed], dtype=np.float32),
        np.array([2 * p.x_limit, p.max_speed], dtype=np.float32),
    ),
    action_space=lambda p: spaces.Discrete(3),
    reset=reset,
    step=step,
    observe=observe,
)
