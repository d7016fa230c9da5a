"""CartPole-v1, batched: Gymnasium 1.4's ``CartPoleEnv`` dynamics in float32.

## Action space
``Discrete(2)``: 0 pushes the cart left, 1 pushes it right (``force_mag`` newtons).

## Observation space
``Box(4,)`` float32: cart position, cart velocity, pole angle (rad), pole angular velocity.
Bounds as Gymnasium's: ``±2 * x_threshold``, ``±inf``, ``±2 * theta_threshold_radians``, ``±inf``.

## Rewards
+1 for every step, the terminating one included (Gymnasium's default, ``sutton_barto_reward=False``).
With ``sutton_barto_reward=True``, as Gymnasium's: 0 for every step and -1 for the terminating one
(the original Sutton & Barto task, whose reward threshold is 0).

## Starting state
Every state variable uniform in ``[-0.05, 0.05)``.

## Episode end
Terminated when ``|x| > x_threshold`` or ``|theta| > theta_threshold_radians``; truncated after
``max_episode_steps`` (500) steps.

## Arguments
The fields of :class:`CartPoleParams`, as keywords of ``gym.make``/``gym.make_vec`` too
(``gym.make("gpu_marl_envs/CartPole-v1", sutton_barto_reward=True)``, Gymnasium's name).

## Version history
v1: matches Gymnasium's CartPole-v1 (explicit Euler integration, as there by default).
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
class CartPoleParams:
    gravity: float = 9.8
    masscart: float = 1.0
    masspole: float = 0.1
    length: float = 0.5  # half the pole's length, as in Gymnasium
    force_mag: float = 10.0
    tau: float = 0.02  # seconds between state updates
    theta_threshold_radians: float = 12 * 2 * math.pi / 360
    x_threshold: float = 2.4
    reset_bound: float = 0.05
    max_episode_steps: int = 500
    sutton_barto_reward: bool = False  # Gymnasium's argument of the same name: see the module docstring

    def __post_init__(self):
        check_params_numbers(self)
        for name in ("masscart", "masspole", "length", "tau", "theta_threshold_radians", "x_threshold"):
            if not getattr(self, name) > 0:
                raise ValueError(f"CartPoleParams.{name} must be > 0, got {getattr(self, name)}")
        if not self.reset_bound >= 0:
            raise ValueError(f"CartPoleParams.reset_bound must be >= 0, got {self.reset_bound}")
        if self.max_episode_steps < 1:
            raise ValueError(f"CartPoleParams.max_episode_steps must be >= 1, got {self.max_episode_steps}")

    @property
    def total_mass(self) -> float:
        return self.masspole + self.masscart

    @property
    def polemass_length(self) -> float:
        return self.masspole * self.length


def observation_space(p: CartPoleParams) -> spaces.Box:
    high = np.array([p.x_threshold * 2, np.inf, p.theta_threshold_radians * 2, np.inf], dtype=np.float32)
    return spaces.Box(-high, high, dtype=np.float32)


def action_space(p: CartPoleParams) -> spaces.Discrete:
    return spaces.Discrete(2)


def reset(p, uniform, num_envs: int) -> torch.Tensor:
    return torch.stack([uniform(k, -p.reset_bound, p.reset_bound) for k in range(4)])


def step(p, state: torch.Tensor, actions: torch.Tensor):
    x, x_dot, theta, theta_dot = state
    force = torch.where(actions == 1, p.force_mag, -p.force_mag).to(state.dtype)
    costheta = torch.cos(theta)
    sintheta = torch.sin(theta)
    # Florian (2005), "Correct equations for the dynamics of the cart-pole system", as Gymnasium.
    temp = (force + p.polemass_length * theta_dot * theta_dot * sintheta) / p.total_mass
    thetaacc = (p.gravity * sintheta - costheta * temp) / (
        p.length * (4.0 / 3.0 - p.masspole * costheta * costheta / p.total_mass)
    )
    xacc = temp - p.polemass_length * thetaacc * costheta / p.total_mass
    x = x + p.tau * x_dot
    x_dot = x_dot + p.tau * xacc
    theta = theta + p.tau * theta_dot
    theta_dot = theta_dot + p.tau * thetaacc
    terminated = (
        (x < -p.x_threshold)
        | (x > p.x_threshold)
        | (theta < -p.theta_threshold_radians)
        | (theta > p.theta_threshold_radians)
    )
    if p.sutton_barto_reward:  # a Python number (torch_params): choosing here costs no device sync
        rewards = -terminated.to(x.dtype)
    else:
        rewards = torch.ones_like(x)
    return torch.stack([x, x_dot, theta, theta_dot]), rewards, terminated


def observe(p, state: torch.Tensor) -> torch.Tensor:
    return state.T


CARTPOLE = EnvDefinition(
    id="CartPole-v1",
    params_type=CartPoleParams,
    state_fields=("x", "x_dot", "theta", "theta_dot"),
    kernel_params=(
        "gravity",
        "masspole",
        "total_mass",
        "length",
        "polemass_length",
        "force_mag",
        "tau",
        "theta_threshold_radians",
        "x_threshold",
        "reset_bound",
        "max_episode_steps",
        "sutton_barto_reward",
    ),
    observation_space=observation_space,
    action_space=action_space,
    reset=reset,
    step=step,
    observe=observe,
    gymnasium_original="CartPole-v1",
    reward_threshold=475.0,  # Gymnasium's
)
