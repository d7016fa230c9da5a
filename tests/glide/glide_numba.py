"""Glide-v0's Numba kernels (a test game of Box actions): the device functions of glide.cu."""

import numpy as np
from gpu_marl_envs.kernels.numba_game import add_rn, cuda, mul_rn, nan_to_zero, numba_game, uniform

ONE = np.float32(1.0)


@numba_game
def game_functions(c):
    N, T, DAMPING, ACCEL = c.NUM_AGENTS, c.EPISODE_LENGTH, c.DAMPING, c.ACCEL

    def reset_env(state, sh, e, seed, episode):
        x, y, vx, vy, t = state
        for a in range(cuda.threadIdx.x, N, cuda.blockDim.x):
            x[e, a] = uniform(seed, episode, 2 * a, -ONE, ONE)
            y[e, a] = uniform(seed, episode, 2 * a + 1, -ONE, ONE)
            vx[e, a] = np.float32(0.0)
            vy[e, a] = np.float32(0.0)
        if cuda.threadIdx.x == 0:
            t[e] = 0

    def step_env(state, sh, e, actions, rewards):
        x, y, vx, vy, t = state
        for a in range(cuda.threadIdx.x, N, cuda.blockDim.x):
            px = min(max(nan_to_zero(actions[e, a, 0]), -ONE), ONE)
            py = min(max(nan_to_zero(actions[e, a, 1]), -ONE), ONE)
            vx[e, a] = add_rn(mul_rn(vx[e, a], DAMPING), mul_rn(px, ACCEL))
            vy[e, a] = add_rn(mul_rn(vy[e, a], DAMPING), mul_rn(py, ACCEL))
            x[e, a] += vx[e, a]
            y[e, a] += vy[e, a]
            rewards[e, a] = -(abs(x[e, a]) + abs(y[e, a]))
        now = t[e] + 1
        cuda.syncthreads()  # every thread has read t
        if cuda.threadIdx.x == 0:
            t[e] = now
        return False, now >= T

    def observe_env(state, sh, e, obs, masks):
        x, y, vx, vy, t = state
        for a in range(cuda.threadIdx.x, N, cuda.blockDim.x):
            obs[e, 4 * a] = x[e, a]
            obs[e, 4 * a + 1] = y[e, a]
            obs[e, 4 * a + 2] = vx[e, a]
            obs[e, 4 * a + 3] = vy[e, a]

    return locals()
