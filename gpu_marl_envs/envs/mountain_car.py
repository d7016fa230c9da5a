"""MountainCar-v0, batched: Gymnasium 1.4's ``MountainCarEnv`` dynamics in float32.

## Action space
``Discrete(3)``: 0 accelerates left, 1 does not accelerate, 2 accelerates right.

## Observation space
``Box(2,)`` float32: car position and velocity, bounded by ``[min_position, max_position]`` and
``[-max_speed, max_speed]`` (-1.2 to 0.6 and -0.07 to 0.07, as Gymnasium's).

## Transition dynamics
As Gymnasium's ``MountainCarEnv.step``, in this order::

    velocity += (action - 1) * force + cos(hill_frequency * position) * (-gravity)
    velocity = clip(velocity, -max_speed, max_speed)
    position += velocity
    position = clip(position, min_position, max_position)
    if position == min_position and velocity < 0: velocity = 0   # inelastic left wall

with ``force = 0.001``, ``gravity = 0.0025`` and ``hill_frequency = 3``.

## Rewards
``reward_per_step`` (-1) for every step, the terminating one included.

## Starting state
Position uniform in ``[reset_low, reset_high)`` = ``[-0.6, -0.4)``; velocity 0. Gymnasium's reset
options ``low``/``high`` are params here (``reset_low``/``reset_high``).

## Episode end
Terminated when ``position >= goal_position`` (0.5) and ``velocity >= goal_velocity`` (0, as
Gymnasium's default ``goal_velocity``); truncated after ``max_episode_steps`` (200) steps.

## Version history
v0: matches Gymnasium's MountainCar-v0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from gymnasium import spaces

from gpu_marl_envs.envs.definition import EnvDefinition
from gpu_marl_envs.validation import check_params_numbers


def check_mountain_car_params(params) -> None:
    """The checks both MountainCar params types share (their physics fields have the same names)."""
    name = type(params).__name__
    check_params_numbers(params)
    if not params.min_position < params.max_position:
        raise ValueError(f"{name} needs min_position < max_position, got {params.min_position}, {params.max_position}")
    if not params.max_speed > 0:
        raise ValueError(f"{name}.max_speed must be > 0, got {params.max_speed}")
    # Reset states must lie in the observation space, whose bounds are the position limits.
    if not params.min_position <= params.reset_low <= params.reset_high <= params.max_position:
        raise ValueError(
            f"{name} needs min_position <= reset_low <= reset_high <= max_position, got "
            f"{params.min_position}, {params.reset_low}, {params.reset_high}, {params.max_position}"
        )
    if params.max_episode_steps < 1:
        raise ValueError(f"{name}.max_episode_steps must be >= 1, got {params.max_episode_steps}")


@dataclass(frozen=True)
class MountainCarParams:
    min_position: float = -1.2
    max_position: float = 0.6
    max_speed: float = 0.07
    goal_position: float = 0.5
    goal_velocity: float = 0.0
    force: float = 0.001  # velocity change per step of a push (actions 0 and 2)
    gravity: float = 0.0025
    hill_frequency: float = 3.0  # the 3 in Gymnasium's cos(3 * position): the valley is sin(3x)-shaped
    reward_per_step: float = -1.0
    reset_low: float = -0.6
    reset_high: float = -0.4
    max_episode_steps: int = 200

    def __post_init__(self):
        check_mountain_car_params(self)


def observation_space(p) -> spaces.Box:
    # Gymnasium: Box(low=[min_position, -max_speed], high=[max_position, max_speed]), float32.
    low = np.array([p.min_position, -p.max_speed], dtype=np.float32)
    high = np.array([p.max_position, p.max_speed], dtype=np.float32)
    return spaces.Box(low, high, dtype=np.float32)


def action_space(p: MountainCarParams) -> spaces.Discrete:
    return spaces.Discrete(3)


def reset(p, uniform, num_envs: int) -> torch.Tensor:
    # Gymnasium: state = [uniform(low=-0.6, high=-0.4), 0]. Draw 0 is the position; the velocity
    # is written as 0 directly (no draw), as the kernels do.
    position = uniform(0, p.reset_low, p.reset_high)
    return torch.stack([position, torch.zeros_like(position)])


def advance(p, position: torch.Tensor, velocity: torch.Tensor, push: torch.Tensor):
    """The physics both MountainCar envs share: one step from ``(position, velocity)`` given the
    action's velocity change ``push``; returns ``(position, velocity, terminated)``.

    Gymnasium writes the discrete env's ``(action - 1) * force + cos(3 * position) * (-gravity)``
    and the continuous env's ``force * power - 0.0025 * cos(3 * position)``: in IEEE arithmetic
    ``a + c * (-g)`` and ``a - g * c`` round identically, so one form serves both.
    """
    velocity = velocity + (push - p.gravity * torch.cos(p.hill_frequency * position))
    velocity = torch.clamp(velocity, -p.max_speed, p.max_speed)
    position = position + velocity
    position = torch.clamp(position, p.min_position, p.max_position)
    # Inelastic collision with the left wall: the car stops there (the right edge needs no rule,
    # it lies past the goal).
    velocity = torch.where((position == p.min_position) & (velocity < 0), 0.0, velocity)
    terminated = (position >= p.goal_position) & (velocity >= p.goal_velocity)
    return position, velocity, terminated


def step(p, state: torch.Tensor, actions: torch.Tensor):
    position, velocity = state
    # Gymnasium: (action - 1) * force, i.e. -force, 0 or +force (actions arrive clamped into [0, 2]).
    push = (actions - 1).to(state.dtype) * p.force
    position, velocity, terminated = advance(p, position, velocity, push)
    rewards = torch.full_like(position, p.reward_per_step)
    return torch.stack([position, velocity]), rewards, terminated


def observe(p, state: torch.Tensor) -> torch.Tensor:
    return state.T


MOUNTAIN_CAR = EnvDefinition(
    id="MountainCar-v0",
    params_type=MountainCarParams,
    state_fields=("position", "velocity"),
    kernel_params=(
        "min_position",
        "max_position",
        "max_speed",
        "goal_position",
        "goal_velocity",
        "force",
        "gravity",
        "hill_frequency",
        "reward_per_step",
        "reset_low",
        "reset_high",
        "max_episode_steps",
    ),
    observation_space=observation_space,
    action_space=action_space,
    reset=reset,
    step=step,
    observe=observe,
    gymnasium_original="MountainCar-v0",
    reward_threshold=-110.0,  # Gymnasium's
)
