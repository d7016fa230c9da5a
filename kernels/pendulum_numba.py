"""Pendulum-v1 Numba kernels; the torch reference is gpu_marl_envs/envs/pendulum.py."""

import math

import numpy as np
from gpu_marl_envs.kernels import rng_numba
from gpu_marl_envs.kernels.numba_api import cuda

_ZERO = np.float32(0.0)


@cuda.jit(device=True)
def reset(state, n, i, seed, episode, p):
    # Gymnasium draws theta, then theta_dot.
    state[i] = rng_numba.uniform(seed, episode, 0, -p.reset_theta_bound, p.reset_theta_bound)
    state[n + i] = rng_numba.uniform(seed, episode, 1, -p.reset_thdot_bound, p.reset_thdot_bound)


@cuda.jit(device=True)
def angle_normalize(x, p):
    # Gymnasium's ((x + pi) % (2 pi)) - pi with Python's modulo: fmod is exact and takes the
    # dividend's sign, so a negative remainder moves up by the (positive) divisor, as torch.remainder.
    # np.float32(...) keeps the simulator (where math.fmod returns a Python float) in float32.
    r = np.float32(math.fmod(x + p.pi, p.two_pi))
    if r < _ZERO:
        r = r + p.two_pi
    return r - p.pi


@cuda.jit(device=True)
def step(state, n, i, actions, p):
    th = state[i]
    thdot = state[n + i]
    u = actions[i, 0]
    if u != u:
        u = _ZERO  # NaN reads as 0 (validation off); min/max alone would drop or keep it by argument order
    u = min(max(u, -p.max_torque), p.max_torque)
    # Gymnasium's cost, on the state before the update and the clipped torque.
    a = angle_normalize(th, p)
    costs = a * a + p.thdot_cost * (thdot * thdot) + p.torque_cost * (u * u)
    newthdot = thdot + (p.gravity_coef * np.float32(math.sin(th)) + p.torque_coef * u) * p.dt
    newthdot = min(max(newthdot, -p.max_speed), p.max_speed)
    newth = th + newthdot * p.dt  # the clipped velocity moves the angle, as in Gymnasium
    state[i] = newth
    state[n + i] = newthdot
    return -costs, False


@cuda.jit(device=True)
def observe(state, n, i, obs, p):
    th = state[i]
    obs[0] = math.cos(th)
    obs[1] = math.sin(th)
    obs[2] = state[n + i]
