"""Acrobot-v1, batched: Gymnasium 1.4's ``AcrobotEnv`` dynamics in float32.

Two links hang in a chain from a fixed pivot; only the joint between them is actuated. The goal is
to swing the free end above a target height.

## Action space
``Discrete(3)``: the torque on the actuated joint, 0 -> ``-torque_mag``, 1 -> 0, 2 -> ``+torque_mag``
(Gymnasium's ``AVAIL_TORQUE = [-1.0, 0.0, +1]``). No torque noise (Gymnasium's default,
``torque_noise_max = 0``).

## Observation space
``Box(6,)`` float32: ``cos(theta1)``, ``sin(theta1)``, ``cos(theta2)``, ``sin(theta2)``, ``dtheta1``,
``dtheta2``. ``theta1`` is the first link's angle from hanging straight down, ``theta2`` the second
link's angle relative to the first. Bounds as Gymnasium's: ``±1`` for the four trigonometric
entries, ``±max_vel_1`` (4 pi) and ``±max_vel_2`` (9 pi) for the angular velocities.

## Rewards
-1 for every step that does not reach the target, 0 for the step that does (and terminates).

## Starting state
All four state variables (``theta1``, ``theta2``, ``dtheta1``, ``dtheta2``) uniform in
``[-0.1, 0.1)``: both links hang down, slightly perturbed.

## Episode end
Terminated when the free end is above the target: ``-cos(theta1) - cos(theta2 + theta1) >
target_height`` (1.0); truncated after ``max_episode_steps`` (500) steps.

## Dynamics
Gymnasium's "book" equations (Sutton and Barto; its default ``book_or_nips = "book"``), integrated
over ``dt`` (0.2 s) by one classical Runge-Kutta step exactly as its ``rk4`` helper does, the torque
held constant over the step. Then the angles are wrapped into ``[-pi, pi]`` (Gymnasium's ``wrap``
while loops, bounded: see ``_wrap``) and the velocities clipped to ``±max_vel_1``, ``±max_vel_2`` (its ``bound``).

Differences from Gymnasium: float32 throughout instead of float64; Gymnasium's
``cos(x - pi / 2)`` is computed as the equal ``sin(x)`` (no float32 rounding of ``x - pi / 2``);
reset bounds are the ``reset_bound`` param rather than ``reset(options={"low", "high"})``; the
``"nips"`` dynamics and torque noise are not offered; ``LINK_LENGTH_2`` is absent because
Gymnasium uses it only to draw (its target test assumes links of length 1, as here).

## Version history
v1: matches Gymnasium's Acrobot-v1.
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
class AcrobotParams:
    dt: float = 0.2  # integration timestep [s]
    link_length_1: float = 1.0  # [m]
    link_mass_1: float = 1.0  # [kg]
    link_mass_2: float = 1.0  # [kg]
    link_com_pos_1: float = 0.5  # [m] position of link 1's centre of mass along it
    link_com_pos_2: float = 0.5  # [m] position of link 2's centre of mass along it
    link_moi: float = 1.0  # moment of inertia of each link
    gravity: float = 9.8  # Gymnasium's local g in _dsdt
    max_vel_1: float = 4 * math.pi
    max_vel_2: float = 9 * math.pi
    torque_mag: float = 1.0  # magnitude of Gymnasium's AVAIL_TORQUE = [-1.0, 0.0, +1]
    target_height: float = 1.0  # the free end must rise above this (in link lengths)
    reset_bound: float = 0.1
    # Passes of the angle wrap each way: covers |theta| <= (2 * 8 + 1) pi after a step, far beyond
    # what one step from |theta| <= pi at |velocity| <= 9 pi reaches (see _wrap).
    wrap_iterations: int = 8
    max_episode_steps: int = 500

    def __post_init__(self):
        check_params_numbers(self)
        # Positive masses, lengths and inertias keep the mass matrix positive definite, so the
        # divisions by d1 and by (d2_const - d2 * d2 / d1) in the dynamics are safe.
        for name in ("dt", "link_length_1", "link_mass_1", "link_mass_2", "link_moi", "max_vel_1", "max_vel_2"):
            if not getattr(self, name) > 0:
                raise ValueError(f"AcrobotParams.{name} must be > 0, got {getattr(self, name)}")
        for name in ("link_com_pos_1", "link_com_pos_2", "torque_mag", "reset_bound"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"AcrobotParams.{name} must be >= 0, got {getattr(self, name)}")
        if self.max_episode_steps < 1:
            raise ValueError(f"AcrobotParams.max_episode_steps must be >= 1, got {self.max_episode_steps}")
        if self.wrap_iterations < 1:
            raise ValueError(f"AcrobotParams.wrap_iterations must be >= 1, got {self.wrap_iterations}")

    # Constant groups of Gymnasium's _dsdt, computed once in float64 (as Gymnasium computes them
    # every call) and rounded to float32 once. With m1, m2, l1, lc1, lc2, I1 = I2 = LINK_MOI:
    #   d1 = m1*lc1**2 + m2*(l1**2 + lc2**2 + 2*l1*lc2*cos(theta2)) + I1 + I2
    #      = d1_const + 2 * m2_l1_lc2 * cos(theta2)
    #   d2 = m2*(lc2**2 + l1*lc2*cos(theta2)) + I2 = d2_const + m2_l1_lc2 * cos(theta2)
    #   phi2 = m2*lc2*g*cos(theta1 + theta2 - pi/2) = phi2_coef * sin(theta1 + theta2)
    #   (m1*lc1 + m2*l1)*g*cos(theta1 - pi/2) = phi1_coef * sin(theta1)
    #   ddtheta2's denominator m2*lc2**2 + I2 - d2**2/d1 = d2_const - d2 * d2 / d1

    @property
    def d1_const(self) -> float:
        m1, m2, l1 = self.link_mass_1, self.link_mass_2, self.link_length_1
        lc1, lc2, moi = self.link_com_pos_1, self.link_com_pos_2, self.link_moi
        return m1 * lc1**2 + m2 * (l1**2 + lc2**2) + moi + moi

    @property
    def d2_const(self) -> float:
        return self.link_mass_2 * self.link_com_pos_2**2 + self.link_moi

    @property
    def m2_l1_lc2(self) -> float:
        return self.link_mass_2 * self.link_length_1 * self.link_com_pos_2

    @property
    def phi1_coef(self) -> float:
        return (self.link_mass_1 * self.link_com_pos_1 + self.link_mass_2 * self.link_length_1) * self.gravity

    @property
    def phi2_coef(self) -> float:
        return self.link_mass_2 * self.link_com_pos_2 * self.gravity

    # Gymnasium's rk4 over t = [0, dt]: dt2 = dt / 2.0 and the final weight dt / 6.0.

    @property
    def half_dt(self) -> float:
        return self.dt / 2.0

    @property
    def sixth_dt(self) -> float:
        return self.dt / 6.0

    @property
    def pi(self) -> float:
        """The angles wrap into ``[-pi, pi]`` (Gymnasium's ``wrap(ns[0], -pi, pi)``)."""
        return math.pi


def observation_space(p: AcrobotParams) -> spaces.Box:
    high = np.array([1.0, 1.0, 1.0, 1.0, p.max_vel_1, p.max_vel_2], dtype=np.float32)
    return spaces.Box(-high, high, dtype=np.float32)


def action_space(p: AcrobotParams) -> spaces.Discrete:
    return spaces.Discrete(3)


def reset(p, uniform, num_envs: int) -> torch.Tensor:
    # Gymnasium: np_random.uniform(low=-0.1, high=0.1, size=(4,)), draw k for state variable k.
    return torch.stack([uniform(k, -p.reset_bound, p.reset_bound) for k in range(4)])


def _dsdt(p, theta1, theta2, dtheta1, dtheta2, torque):
    """Gymnasium's ``AcrobotEnv._dsdt`` with the "book" ``ddtheta2``, term by term in its order."""
    cos_theta2 = torch.cos(theta2)
    sin_theta2 = torch.sin(theta2)
    d1 = p.d1_const + 2.0 * p.m2_l1_lc2 * cos_theta2
    d2 = p.d2_const + p.m2_l1_lc2 * cos_theta2
    phi2 = p.phi2_coef * torch.sin(theta1 + theta2)
    phi1 = (
        -p.m2_l1_lc2 * (dtheta2 * dtheta2) * sin_theta2
        - 2.0 * p.m2_l1_lc2 * dtheta2 * dtheta1 * sin_theta2
        + p.phi1_coef * torch.sin(theta1)
        + phi2
    )
    ddtheta2 = (torque + d2 / d1 * phi1 - p.m2_l1_lc2 * (dtheta1 * dtheta1) * sin_theta2 - phi2) / (
        p.d2_const - d2 * d2 / d1
    )
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return dtheta1, dtheta2, ddtheta1, ddtheta2


def _rk4(p, y0, torque):
    """Gymnasium's ``rk4(self._dsdt, s_augmented, [0, self.dt])``: one classical Runge-Kutta step.
    The torque is the augmented state's fifth entry, whose derivative is 0, so it stays constant."""
    k1 = _dsdt(p, *y0, torque)
    k2 = _dsdt(p, *[y + p.half_dt * k for y, k in zip(y0, k1)], torque)
    k3 = _dsdt(p, *[y + p.half_dt * k for y, k in zip(y0, k2)], torque)
    k4 = _dsdt(p, *[y + p.dt * k for y, k in zip(y0, k3)], torque)
    return [y + p.sixth_dt * (a + 2.0 * b + 2.0 * c + d) for y, a, b, c, d in zip(y0, k1, k2, k3, k4)]


def _wrap(p, x, m, M):
    """Gymnasium's ``wrap(x, m, M)``: subtract (then add) ``M - m`` while ``x`` is above ``M``
    (below ``m``), one element-wise pass per iteration, at most ``p.wrap_iterations`` passes each
    way: a data-independent count keeps the step free of host syncs (CUDA-graph capturable) and
    the kernels free of unbounded loops. The passes cover every angle one step reaches from the
    state space (``|theta| <= pi``, bounded velocities) exactly as Gymnasium's loops; an angle
    still out of range (only from a hand-set state) is brought in with the exact ``fmod``."""
    diff = M - m
    for _ in range(p.wrap_iterations):
        x = torch.where(x > M, x - diff, x)
    for _ in range(p.wrap_iterations):
        x = torch.where(x < m, x + diff, x)
    x = torch.where(x > M, m + torch.fmod(x - m, diff), x)
    return torch.where(x < m, M - torch.fmod(M - x, diff), x)


def _bound(x, m, M):
    """Gymnasium's ``bound(x, m, M) = min(max(x, m), M)`` (NaN passes through, as there)."""
    return torch.clamp(x, m, M)


def step(p, state: torch.Tensor, actions: torch.Tensor):
    theta1, theta2, dtheta1, dtheta2 = state
    torque = (actions - 1).to(state.dtype) * p.torque_mag  # actions 0, 1, 2 -> -1, 0, +1 torque
    theta1, theta2, dtheta1, dtheta2 = _rk4(p, (theta1, theta2, dtheta1, dtheta2), torque)
    theta1 = _wrap(p, theta1, -p.pi, p.pi)
    theta2 = _wrap(p, theta2, -p.pi, p.pi)
    dtheta1 = _bound(dtheta1, -p.max_vel_1, p.max_vel_1)
    dtheta2 = _bound(dtheta2, -p.max_vel_2, p.max_vel_2)
    # Gymnasium's _terminal on the new state: -cos(s[0]) - cos(s[1] + s[0]) > 1.0
    terminated = -torch.cos(theta1) - torch.cos(theta2 + theta1) > p.target_height
    rewards = torch.where(terminated, 0.0, -1.0).to(state.dtype)
    return torch.stack([theta1, theta2, dtheta1, dtheta2]), rewards, terminated


def observe(p, state: torch.Tensor) -> torch.Tensor:
    theta1, theta2, dtheta1, dtheta2 = state
    return torch.stack(
        [torch.cos(theta1), torch.sin(theta1), torch.cos(theta2), torch.sin(theta2), dtheta1, dtheta2], dim=1
    )


ACROBOT = EnvDefinition(
    id="Acrobot-v1",
    params_type=AcrobotParams,
    state_fields=("theta1", "theta2", "dtheta1", "dtheta2"),
    kernel_params=(
        "dt",
        "half_dt",
        "sixth_dt",
        "d1_const",
        "d2_const",
        "m2_l1_lc2",
        "phi1_coef",
        "phi2_coef",
        "torque_mag",
        "pi",
        "max_vel_1",
        "max_vel_2",
        "target_height",
        "reset_bound",
        "wrap_iterations",
        "max_episode_steps",
    ),
    observation_space=observation_space,
    action_space=action_space,
    reset=reset,
    step=step,
    observe=observe,
    gymnasium_original="Acrobot-v1",
    reward_threshold=-100.0,  # Gymnasium's
)
