"""Puck-v0's Numba kernels (device functions; the framework adds the kernels around them)."""

import numpy as np
from gpu_marl_envs.kernels.numba_api import add_rn, cuda, mul_rn
from gpu_marl_envs.kernels.rng_numba import uniform


@cuda.jit(device=True)
def reset(state, n, i, seed, episode, p):
    state[i] = uniform(seed, episode, 0, -p.reset_bound, p.reset_bound)
    state[n + i] = np.float32(0.0)


@cuda.jit(device=True)
def step(state, n, i, actions, p):
    push = np.float32(min(max(actions[i], 0), 2) - 1) * p.force
    v = min(max(add_rn(state[n + i], mul_rn(p.dt, push)), -p.max_speed), p.max_speed)
    x = add_rn(state[i], mul_rn(p.dt, v))
    state[i] = x
    state[n + i] = v
    return -abs(x), abs(x) > p.x_limit


@cuda.jit(device=True)
def observe(state, n, i, obs, p):
    obs[0] = state[i]
    obs[1] = state[n + i]
