"""MountainCar-v0 Numba kernels; the torch reference is gpu_marl_envs/envs/mountain_car.py.

``reset``, ``advance`` and ``observe`` are shared with MountainCarContinuous-v0
(``mountain_car_continuous_numba.py``), as in the torch reference and ``mountain_car.cuh``; both
params records name the fields they read alike.
"""

import math

import numpy as np
from gpu_marl_envs.kernels import rng_numba
from gpu_marl_envs.kernels.numba_api import cuda

_ZERO = np.float32(0.0)


@cuda.jit(device=True)
def reset(state, n, i, seed, episode, p):
    # Gymnasium: state = [uniform(low=-0.6, high=-0.4), 0]. Draw 0 is the position; the velocity
    # is written as 0 directly (no draw), as the torch reference does.
    state[i] = rng_numba.uniform(seed, episode, 0, p.reset_low, p.reset_high)
    state[n + i] = _ZERO


@cuda.jit(device=True)
def advance(state, n, i, push, p):
    """One step of env i given the action's velocity change ``push``; returns terminated.

    Gymnasium's discrete ``a + cos(3 * position) * (-gravity)`` and continuous
    ``a - 0.0025 * cos(3 * position)`` round identically, so one form serves both.
    """
    position = state[i]
    velocity = state[n + i]
    # np.float32 around math.cos: under the simulator it returns a Python float.
    velocity = velocity + (push - p.gravity * np.float32(math.cos(p.hill_frequency * position)))
    velocity = min(max(velocity, -p.max_speed), p.max_speed)
    position = position + velocity
    position = min(max(position, p.min_position), p.max_position)
    # Inelastic collision with the left wall: the car stops there.
    if position == p.min_position and velocity < _ZERO:
        velocity = _ZERO
    state[i] = position
    state[n + i] = velocity
    return position >= p.goal_position and velocity >= p.goal_velocity


@cuda.jit(device=True)
def step(state, n, i, actions, p):
    # Out-of-range actions clamp into Discrete(3) (the torch backend clamps before its step).
    a = actions[i]
    a = 0 if a < 0 else (2 if a > 2 else a)
    # Gymnasium: (action - 1) * force, i.e. -force, 0 or +force.
    push = np.float32(a - 1) * p.force
    terminated = advance(state, n, i, push, p)
    return p.reward_per_step, terminated


@cuda.jit(device=True)
def observe(state, n, i, obs, p):
    obs[0] = state[i]
    obs[1] = state[n + i]
