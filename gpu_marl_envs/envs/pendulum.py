"""Pendulum-v1, batched: Gymnasium 1.4's ``PendulumEnv`` dynamics in float32.

## Description
The inverted pendulum swing-up: a pendulum hangs from a fixed pivot, and torque applied at the
pivot must swing it upright (``theta = 0``) and keep it there.

## Action space
``Box(-max_torque, max_torque, (1,))`` float32: the torque in N m, positive counter-clockwise.
Torques outside the bounds are clipped into them (``max_torque = 2``).

## Observation space
``Box(3,)`` float32: ``cos(theta)``, ``sin(theta)``, angular velocity ``theta_dot`` (rad/s).
Bounds as Gymnasium's: ``±1``, ``±1``, ``±max_speed`` (``max_speed = 8``).

## Rewards
``r = -(angle_normalize(theta)**2 + 0.1 * theta_dot**2 + 0.001 * torque**2)``, from the state
*before* the step and the clipped torque, where ``angle_normalize(x) = ((x + pi) % (2 * pi)) - pi``
with Python's modulo (the result takes the divisor's sign). At most 0, at least about -16.27.

## Starting state
``theta`` uniform in ``[-pi, pi)`` and ``theta_dot`` uniform in ``[-1, 1)``, ``pi`` being the
float32 nearest to ``math.pi`` (3.14159274..., 8.7e-8 above it), used by every backend.

## Episode end
Never terminated; truncated after ``max_episode_steps`` (200) steps.

## Arguments
``PendulumParams(g=9.81)`` sets gravity as Gymnasium's ``make("Pendulum-v1", g=9.81)``;
``reset_theta_bound``/``reset_thdot_bound`` play the role of Gymnasium's ``x_init``/``y_init``
reset options, fixed per env here.

## Version history
v1: matches Gymnasium's Pendulum-v1. ``theta`` is not wrapped in the state (as in Gymnasium), so it
grows while the pendulum spins; only the reward normalises it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from gymnasium import spaces

from gpu_marl_envs.envs.definition import EnvDefinition
from gpu_marl_envs.validation import check_params_numbers


@dataclass(frozen=True)
class PendulumParams:
    max_speed: float = 8.0  # rad/s, the clip of theta_dot
    max_torque: float = 2.0  # N m, the clip of the action
    dt: float = 0.05  # seconds between state updates
    g: float = 10.0
    m: float = 1.0
    l: float = 1.0  # noqa: E741  (Gymnasium's name)
    thdot_cost: float = 0.1  # weight of theta_dot**2 in the cost
    torque_cost: float = 0.001  # weight of torque**2 in the cost
    reset_theta_bound: float = math.pi  # Gymnasium's DEFAULT_X
    reset_thdot_bound: float = 1.0  # Gymnasium's DEFAULT_Y
    max_episode_steps: int = 200

    def __post_init__(self):
        check_params_numbers(self)
        for name in ("max_speed", "dt", "m", "l"):
            if not getattr(self, name) > 0:
                raise ValueError(f"PendulumParams.{name} must be > 0, got {getattr(self, name)}")
        for name in ("max_torque", "thdot_cost", "torque_cost", "reset_theta_bound", "reset_thdot_bound"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"PendulumParams.{name} must be >= 0, got {getattr(self, name)}")
        if self.max_episode_steps < 1:
            raise ValueError(f"PendulumParams.max_episode_steps must be >= 1, got {self.max_episode_steps}")

    @property
    def gravity_coef(self) -> float:
        """``3 g / (2 l)``: the angular acceleration per unit ``sin(theta)``, as Gymnasium writes it."""
        return 3 * self.g / (2 * self.l)

    @property
    def torque_coef(self) -> float:
        """``3 / (m l**2)``: the angular acceleration per unit torque."""
        return 3.0 / (self.m * self.l**2)

    @property
    def pi(self) -> float:
        """For ``angle_normalize``; every backend receives it as float32 (3.14159274...)."""
        return math.pi

    @property
    def two_pi(self) -> float:
        """The modulus of ``angle_normalize``; as float32 it is exactly ``2 * float32(pi)``."""
        return 2 * math.pi


def observation_space(p: PendulumParams) -> spaces.Box:
    high = np.array([1.0, 1.0, p.max_speed], dtype=np.float32)
    return spaces.Box(low=-high, high=high, dtype=np.float32)


def action_space(p: PendulumParams) -> spaces.Box:
    return spaces.Box(low=-p.max_torque, high=p.max_torque, shape=(1,), dtype=np.float32)


def reset(p, uniform, num_envs: int) -> torch.Tensor:
    # Gymnasium draws uniform(low=-high, high=high) with high = [DEFAULT_X, DEFAULT_Y]: theta, then theta_dot.
    theta = uniform(0, -p.reset_theta_bound, p.reset_theta_bound)
    theta_dot = uniform(1, -p.reset_thdot_bound, p.reset_thdot_bound)
    return torch.stack([theta, theta_dot])


def angle_normalize(p, x: torch.Tensor) -> torch.Tensor:
    # Python's % as Gymnasium's angle_normalize, written as the kernels write it: the exact fmod,
    # plus the divisor when negative. (torch.remainder need not be exact on every device.)
    r = torch.fmod(x + p.pi, p.two_pi)
    return torch.where(r < 0, r + p.two_pi, r) - p.pi


def step(p, state: torch.Tensor, actions: torch.Tensor):
    th, thdot = state
    u = torch.clamp(actions[:, 0], -p.max_torque, p.max_torque)
    # Gymnasium's cost, on the state before the update and the clipped torque.
    a = angle_normalize(p, th)
    costs = a * a + p.thdot_cost * (thdot * thdot) + p.torque_cost * (u * u)
    newthdot = thdot + (p.gravity_coef * torch.sin(th) + p.torque_coef * u) * p.dt
    newthdot = torch.clamp(newthdot, -p.max_speed, p.max_speed)
    newth = th + newthdot * p.dt  # the clipped velocity moves the angle, as in Gymnasium
    terminated = torch.zeros_like(th, dtype=torch.bool)
    return torch.stack([newth, newthdot]), -costs, terminated


def observe(p, state: torch.Tensor) -> torch.Tensor:
    th, thdot = state
    return torch.stack([torch.cos(th), torch.sin(th), thdot], dim=1)


PENDULUM = EnvDefinition(
    id="Pendulum-v1",
    params_type=PendulumParams,
    state_fields=("theta", "theta_dot"),
    kernel_params=(
        "max_speed",
        "max_torque",
        "dt",
        "gravity_coef",
        "torque_coef",
        "thdot_cost",
        "torque_cost",
        "pi",
        "two_pi",
        "reset_theta_bound",
        "reset_thdot_bound",
        "max_episode_steps",
    ),
    observation_space=observation_space,
    action_space=action_space,
    reset=reset,
    step=step,
    observe=observe,
    gymnasium_original="Pendulum-v1",
)
