"""Cover-v0's Numba kernels: the device functions of cover.cu, for the constants ``c`` of game.py."""

import math

import numpy as np
from gpu_marl_envs.kernels.numba_game import U, cuda, int32, numba_game, uniform


@numba_game
def game_functions(c):
    N, L, T = c.NUM_AGENTS, c.GRID_LENGTH, c.EPISODE_LENGTH
    DIM = 2 + 4 * N
    AGENTS, FEATURES = U(N), U(N * DIM)  # unsigned loop bounds (docs/custom_env.md, "Numba as fast as CUDA C")

    def shared():
        return (cuda.shared.array(1, int32),)  # the count of landmarks covered

    def cell(seed, episode, draw):
        return min(math.floor(uniform(seed, episode, draw, np.float32(0.0), np.float32(L + 1))), L)

    def reset_env(state, sh, e, seed, episode):
        x, y, landmark_x, landmark_y, t = state
        a = U(cuda.threadIdx.x)
        while a < AGENTS:
            x[e, a] = cell(seed, episode, a)
            y[e, a] = cell(seed, episode, N + a)
            landmark_x[e, a] = cell(seed, episode, 2 * N + a)
            landmark_y[e, a] = cell(seed, episode, 3 * N + a)
            a = U(a + U(cuda.blockDim.x))
        if cuda.threadIdx.x == 0:
            t[e] = 0

    def step_env(state, sh, e, actions, rewards):
        x, y, landmark_x, landmark_y, t = state
        covered = sh[0]
        if cuda.threadIdx.x == 0:
            covered[0] = 0
        a = U(cuda.threadIdx.x)
        while a < AGENTS:
            action = actions[e, a]
            x[e, a] = min(max(x[e, a] + np.int32(action == 1) - np.int32(action == 2), 0), L)
            y[e, a] = min(max(y[e, a] + np.int32(action == 3) - np.int32(action == 4), 0), L)
            a = U(a + U(cuda.blockDim.x))
        cuda.syncthreads()  # every agent has moved; covered is 0
        j = U(cuda.threadIdx.x)
        while j < AGENTS:
            on = False
            for i in range(N):  # not a: one name, one type (a is unsigned)
                on = on or (x[e, i] == landmark_x[e, j] and y[e, i] == landmark_y[e, j])
            if on:
                cuda.atomic.add(covered, 0, 1)
            j = U(j + U(cuda.blockDim.x))
        cuda.syncthreads()
        now = t[e] + 1
        term = covered[0] == N
        trunc = now >= T and not term
        a = U(cuda.threadIdx.x)
        while a < AGENTS:
            rewards[e, a] = np.float32(covered[0] - N) / np.float32(N)
            a = U(a + U(cuda.blockDim.x))
        cuda.syncthreads()  # every thread has read t
        if cuda.threadIdx.x == 0:
            t[e] = now
        return term, trunc

    def observe_env(state, sh, e, obs, masks):
        x, y, landmark_x, landmark_y, t = state
        k = U(cuda.threadIdx.x)
        while k < FEATURES:
            a, f = U(k // U(DIM)), U(k % U(DIM))
            j = (f - 2) // 2 % N  # the landmark or agent of feature f >= 2
            is_x = f % 2 == 0
            own = x[e, a] if is_x else y[e, a]
            if f < 2 + 2 * N:
                other = landmark_x[e, j] if is_x else landmark_y[e, j]
            else:
                other = x[e, j] if is_x else y[e, j]
            obs[e, k] = np.float32(own if f < 2 else other - own) / np.float32(L)
            k = U(k + U(cuda.blockDim.x))

    return locals()
