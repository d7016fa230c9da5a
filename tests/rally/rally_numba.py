"""Rally-v0's Numba kernels: the device functions of rally.cu, for the constants ``c`` of game.py."""

import numpy as np
from gpu_marl_envs.kernels.numba_game import cuda, float32, int32, numba_game, uniform


@numba_game
def game_functions(c):
    N, T, BOUND, RADIUS, MOVES = c.NUM_AGENTS, c.EPISODE_LENGTH, c.BOUND, c.RADIUS, c.MOVES
    DIM = 2 + 2 * N

    def shared():  # one cuda.shared.array per line: the simulator tells them apart by line
        x = cuda.shared.array(N, float32)  # the positions after the moves
        y = cuda.shared.array(N, float32)
        gathered = cuda.shared.array(1, int32)  # agents with every agent near them
        return x, y, gathered

    def reset_env(state, sh, e, seed, episode):
        x, y, t = state
        for a in range(cuda.threadIdx.x, N, cuda.blockDim.x):
            x[e, a] = uniform(seed, episode, 2 * a, -BOUND, BOUND)
            y[e, a] = uniform(seed, episode, 2 * a + 1, -BOUND, BOUND)
        if cuda.threadIdx.x == 0:
            t[e] = 0

    def step_env(state, sh, e, actions, rewards):
        x, y, t = state
        sx, sy, gathered = sh
        if cuda.threadIdx.x == 0:
            gathered[0] = 0
        for a in range(cuda.threadIdx.x, N, cuda.blockDim.x):  # actions[e, a] is agent a's (2,) int64 row
            sx[a] = min(max(x[e, a] + MOVES[min(max(actions[e, a, 0], 0), 2)], -BOUND), BOUND)
            sy[a] = min(max(y[e, a] + MOVES[min(max(actions[e, a, 1], 0), 2)], -BOUND), BOUND)
        cuda.syncthreads()  # every agent has moved; gathered is 0
        for a in range(cuda.threadIdx.x, N, cuda.blockDim.x):
            count = 0
            for j in range(N):
                if abs(sx[j] - sx[a]) <= RADIUS and abs(sy[j] - sy[a]) <= RADIUS:
                    count += 1
            rewards[e, a] = np.float32(count) / np.float32(N)
            if count == N:
                cuda.atomic.add(gathered, 0, 1)
            x[e, a] = sx[a]
            y[e, a] = sy[a]
        cuda.syncthreads()
        now = t[e] + 1
        term = gathered[0] == N
        trunc = now >= T and not term
        cuda.syncthreads()  # every thread has read t
        if cuda.threadIdx.x == 0:
            t[e] = now
        return term, trunc

    def observe_env(state, sh, e, obs, masks):
        x, y, t = state
        for k in range(cuda.threadIdx.x, N * DIM, cuda.blockDim.x):
            a, f = k // DIM, k % DIM
            own = x[e, a] if f % 2 == 0 else y[e, a]
            j = (f - 2) // 2  # the agent of feature f >= 2
            obs[e, k] = own if f < 2 else (x[e, j] if f % 2 == 0 else y[e, j]) - own

    return locals()
