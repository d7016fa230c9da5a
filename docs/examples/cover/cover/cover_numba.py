"""Cover-v0's Numba kernels: the device functions of cover.cu, for the constants ``c`` of game.py."""

import math

import numpy as np
from gpu_marl_envs.kernels.numba_api import assume
from gpu_marl_envs.kernels.numba_game import U, cuda, int32, numba_game, uniform


@numba_game
def game_functions(c):
    N, L, T = c.NUM_AGENTS, c.GRID_LENGTH, c.EPISODE_LENGTH
    DIM = 2 + 4 * N
    AGENTS, FEATURES = U(N), U(N * DIM)  # unsigned loop bounds (docs/custom_env.md, "Numba as fast as CUDA C")

    def shared():
        return (cuda.shared.array(1, int32),)  # the count of landmarks covered

    # Cells in int32: np.int32 around a sum of cells (Numba adds int32s in 64 bits) and these bounds
    # (beside a Python int, 64-bit to Numba, a cell is widened): else the moves' min and max are 64-bit.
    ZERO, LAST = np.int32(0), np.int32(L)

    def known_shapes(state):
        # The rows' lengths, for the compiler (docs/custom_env.md, "Numba as fast as CUDA C", rule 5):
        # Numba would read each from its array's shape at run time, a 64-bit product per array.
        x, y, landmark_x, landmark_y, t = state
        assume(x.shape[1] == N)
        assume(y.shape[1] == N)
        assume(landmark_x.shape[1] == N)
        assume(landmark_y.shape[1] == N)

    def cell(seed, episode, draw):
        # (Numba's floor is int64: beside L it compiled to a min in float64, then a conversion.)
        return min(np.int32(math.floor(uniform(seed, episode, draw, np.float32(0.0), np.float32(L + 1)))), LAST)

    def reset_env(state, sh, e, seed, episode):
        x, y, landmark_x, landmark_y, t = state
        known_shapes(state)
        a = U(cuda.threadIdx.x)
        while a < AGENTS:
            x[e, a] = cell(seed, episode, a)
            y[e, a] = cell(seed, episode, U(a + U(N)))  # (unsigned: N + a is 64-bit, its carry too)
            landmark_x[e, a] = cell(seed, episode, U(a + U(2 * N)))
            landmark_y[e, a] = cell(seed, episode, U(a + U(3 * N)))
            a = U(a + U(cuda.blockDim.x))
        if cuda.threadIdx.x == 0:
            t[e] = 0

    def step_env(state, sh, e, actions, rewards):
        x, y, landmark_x, landmark_y, t = state
        known_shapes(state)
        assume(actions.shape[1] == N)
        assume(rewards.shape[1] == N)
        covered = sh[0]
        if cuda.threadIdx.x == 0:
            covered[0] = 0
        a = U(cuda.threadIdx.x)
        while a < AGENTS:
            action = actions[e, a]
            x[e, a] = min(max(np.int32(x[e, a] + np.int32(action == 1) - np.int32(action == 2)), ZERO), LAST)
            y[e, a] = min(max(np.int32(y[e, a] + np.int32(action == 3) - np.int32(action == 4)), ZERO), LAST)
            a = U(a + U(cuda.blockDim.x))
        cuda.syncthreads()  # every agent has moved; covered is 0
        j = U(cuda.threadIdx.x)
        while j < AGENTS:
            # Every cell loaded before any is compared: `or` and `and` evaluate lazily, each pair's
            # loads waiting on the previous comparison (a round trip to memory per agent).
            lx, ly = landmark_x[e, j], landmark_y[e, j]
            on = False
            for i in range(N):  # not a: one name, one type (a is unsigned)
                on = on | ((x[e, i] == lx) & (y[e, i] == ly))
            if on:
                cuda.atomic.add(covered, 0, 1)
            j = U(j + U(cuda.blockDim.x))
        cuda.syncthreads()
        now = t[e] + 1
        term = covered[0] == N
        trunc = now >= T and not term
        a = U(cuda.threadIdx.x)
        while a < AGENTS:
            # (np.int32: the difference is int64 to Numba, and so would its conversion be.)
            rewards[e, a] = np.float32(np.int32(covered[0] - N)) / np.float32(N)
            a = U(a + U(cuda.blockDim.x))
        cuda.syncthreads()  # every thread has read t
        if cuda.threadIdx.x == 0:
            t[e] = now
        return term, trunc

    def first_word():
        # This thread's first observation word k, its agent a and feature f (k = a * DIM + f), and
        # the agents and features a stride of blockDim.x words moves them by.
        k, threads = U(cuda.threadIdx.x), U(cuda.blockDim.x)
        a, agents_step = U(k // U(DIM)), U(threads // U(DIM))
        return k, a, U(k - U(a * U(DIM))), agents_step, U(threads - U(agents_step * U(DIM)))

    def next_word(a, f, agents_step, features_step):
        # (agent, feature) of the word a stride further on: carried from word to word, not a
        # division and a remainder of each word's index.
        f = U(f + features_step)
        if f >= U(DIM):
            return U(a + U(agents_step + U(1))), U(f - U(DIM))
        return U(a + agents_step), f

    def observe_env(state, sh, e, obs, masks):
        x, y, landmark_x, landmark_y, t = state
        known_shapes(state)
        assume(obs.shape[1] == FEATURES)
        k, a, f, agents_step, features_step = first_word()
        while k < FEATURES:
            # j: the landmark or agent of feature f >= 2, written so that it is an index for f < 2 too
            # (where its load is made and its value unused), unsigned as cover.cu's
            j = U(U(U(f + U(2 * N - 2)) // U(2)) % AGENTS)
            is_x = f % U(2) == U(0)
            own = x[e, a] if is_x else y[e, a]
            if f < U(2 + 2 * N):
                other = landmark_x[e, j] if is_x else landmark_y[e, j]
            else:
                other = x[e, j] if is_x else y[e, j]
            # (The difference in int32: Numba's int32 - int32 is 64-bit, and so its conversion.)
            obs[e, k] = np.float32(own if f < U(2) else np.int32(other - own)) / np.float32(L)
            k = U(k + U(cuda.blockDim.x))
            a, f = next_word(a, f, agents_step, features_step)

    return locals()
