"""MountainCarContinuous-v0, batched: Gymnasium 1.4's ``Continuous_MountainCarEnv`` in float32.

## Action space
``Box(1,)`` float32 in ``[min_action, max_action]`` = ``[-1, 1]``: the push on the car.

## Observation space
``Box(2,)`` float32: car position and velocity, bounded by ``[min_position, max_position]`` and
``[-max_speed, max_speed]`` (-1.2 to 0.6 and -0.07 to 0.07, as Gymnasium's).

## Transition dynamics
As Gymnasium's ``Continuous_MountainCarEnv.step``, in this order::

    force = min(max(action, min_action), max_action)
    velocity += force * power - gravity * cos(hill_frequency * position)
    velocity = clip(velocity, -max_speed, max_speed)
    position += velocity
    position = clip(position, min_position, max_position)
    if position == min_position and velocity < 0: velocity = 0   # inelastic left wall

with ``power = 0.0015``, ``gravity = 0.0025`` (a literal in Gymnasium) and ``hill_frequency = 3``.
The physics is shared with MountainCar-v0 (:func:`gpu_marl_envs.envs.mountain_car.advance`).

## Rewards
``goal_reward`` (+100) on the terminating step, minus ``action_cost * action**2`` (0.1) every step.
As in Gymnasium, the cost uses the action as given, *not* clipped to the action space (only the
force is clipped). With action validation off, a NaN action is read as 0.

## Starting state
Position uniform in ``[reset_low, reset_high)`` = ``[-0.6, -0.4)``; velocity 0. Gymnasium's reset
options ``low``/``high`` are params here (``reset_low``/``reset_high``).

## Episode end
Terminated when ``position >= goal_position`` (0.45) and ``velocity >= goal_velocity`` (0, as
Gymnasium's default ``goal_velocity``); truncated after ``max_episode_steps`` (999) steps.

## Version history
v0: matches Gymnasium's MountainCarContinuous-v0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from gymnasium import spaces

from gpu_marl_envs.envs.definition import EnvDefinition
from gpu_marl_envs.envs.mountain_car import advance, check_mountain_car_params, observation_space, observe, reset


@dataclass(frozen=True)
class MountainCarContinuousParams:
    min_action: float = -1.0
    max_action: float = 1.0
    min_position: float = -1.2
    max_position: float = 0.6
    max_speed: float = 0.07
    goal_position: float = 0.45  # 0.5 in MountainCar-v0; 0.45 in Arnaud de Broissia's version, as Gymnasium
    goal_velocity: float = 0.0
    power: float = 0.0015  # velocity change per step of a push of 1
    gravity: float = 0.0025
    hill_frequency: float = 3.0  # the 3 in Gymnasium's cos(3 * position): the valley is sin(3x)-shaped
    goal_reward: float = 100.0
    action_cost: float = 0.1  # times action**2, subtracted every step
    reset_low: float = -0.6
    reset_high: float = -0.4
    max_episode_steps: int = 999

    def __post_init__(self):
        check_mountain_car_params(self)
        if not self.min_action <= self.max_action:
            raise ValueError(
                f"MountainCarContinuousParams needs min_action <= max_action, got {self.min_action}, {self.max_action}"
            )


def action_space(p: MountainCarContinuousParams) -> spaces.Box:
    return spaces.Box(low=p.min_action, high=p.max_action, shape=(1,), dtype=np.float32)


def step(p, state: torch.Tensor, actions: torch.Tensor):
    position, velocity = state
    action = actions[:, 0]  # NaN already read as 0
    # Gymnasium: force = min(max(action[0], min_action), max_action).
    force = torch.clamp(action, p.min_action, p.max_action)
    position, velocity, terminated = advance(p, position, velocity, force * p.power)
    # Gymnasium: reward = 100 if terminated else 0, then reward -= pow(action[0], 2) * 0.1, with
    # the unclipped action.
    base = torch.where(terminated, p.goal_reward, torch.zeros_like(position))
    rewards = base - action * action * p.action_cost
    return torch.stack([position, velocity]), rewards, terminated


MOUNTAIN_CAR_CONTINUOUS = EnvDefinition(
    id="MountainCarContinuous-v0",
    params_type=MountainCarContinuousParams,
    state_fields=("position", "velocity"),
    kernel_params=(
        "min_action",
        "max_action",
        "min_position",
        "max_position",
        "max_speed",
        "goal_position",
        "goal_velocity",
        "power",
        "gravity",
        "hill_frequency",
        "goal_reward",
        "action_cost",
        "reset_low",
        "reset_high",
        "max_episode_steps",
    ),
    observation_space=observation_space,
    action_space=action_space,
    reset=reset,
    step=step,
    observe=observe,
    gymnasium_original="MountainCarContinuous-v0",
    reward_threshold=90.0,  # Gymnasium's
)
