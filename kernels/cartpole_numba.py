"""CartPole-v1 Numba kernels; the torch reference is gpu_marl_envs/envs/cartpole.py."""

import math

import numpy as np
from gpu_marl_envs.kernels import rng_numba
from gpu_marl_envs.kernels.numba_api import cuda

_FOUR_THIRDS = np.float32(4.0) / np.float32(3.0)


@cuda.jit(device=True)
def reset(state, n, i, seed, episode, p):
    for k in range(4):
        state[k * n + i] = rng_numba.uniform(seed, episode, k, -p.reset_bound, p.reset_bound)


@cuda.jit(device=True)
def step(state, n, i, actions, p):
    x = state[i]
    x_dot = state[n + i]
    theta = state[2 * n + i]
    theta_dot = state[3 * n + i]
    force = p.force_mag if actions[i] >= 1 else -p.force_mag  # out-of-range actions clamp into {0, 1}
    # np.float32 keeps the simulator (where math.cos returns a Python float) on the float32 path.
    costheta = np.float32(math.cos(theta))
    sintheta = np.float32(math.sin(theta))
    temp = (force + p.polemass_length * theta_dot * theta_dot * sintheta) / p.total_mass
    thetaacc = (p.gravity * sintheta - costheta * temp) / (
        p.length * (_FOUR_THIRDS - p.masspole * costheta * costheta / p.total_mass)
    )
    xacc = temp - p.polemass_length * thetaacc * costheta / p.total_mass
    x = x + p.tau * x_dot
    x_dot = x_dot + p.tau * xacc
    theta = theta + p.tau * theta_dot
    theta_dot = theta_dot + p.tau * thetaacc
    state[i] = x
    state[n + i] = x_dot
    state[2 * n + i] = theta
    state[3 * n + i] = theta_dot
    terminated = (
        x < -p.x_threshold
        or x > p.x_threshold
        or theta < -p.theta_threshold_radians
        or theta > p.theta_threshold_radians
    )
    if p.sutton_barto_reward:  # Gymnasium's sutton_barto_reward: 0 per step, -1 for the terminating one
        return np.float32(-1.0) if terminated else np.float32(0.0), terminated
    return np.float32(1.0), terminated


@cuda.jit(device=True)
def observe(state, n, i, obs, p):
    for k in range(4):
        obs[k] = state[k * n + i]
