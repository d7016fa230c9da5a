"""SimpleSpread-v3's Numba kernels: the device functions of simple_spread.cu (which says how the
block's threads share the work), for the constants ``c`` of gpu_marl_envs/envs/simple_spread.py (the
reference, which documents the rules); the physics is kernels/mpe_numba.py."""

import math

import numpy as np
from gpu_marl_envs.kernels import mpe_numba as mpe
from gpu_marl_envs.kernels.multi_agent_numba import GameFunctions, team_functions
from gpu_marl_envs.kernels.numba_api import I64, U, add_rn, assume, cuda, inline_device, mul_rn
from gpu_marl_envs.kernels.rng_numba import uniform
from numba import float32

# Written with team_functions(c): the backend packs several games to a block, as CUDA C does.
PACKS_GAMES = True

LOW, HIGH = np.float32(-1.0), np.float32(1.0)


def game_functions(c) -> GameFunctions:
    team, lane, lanes, sync = team_functions(c)  # this game's team of lanes (packed: PACKS_GAMES)
    GAMES = c.GME_GAMES_PER_BLOCK
    stage, stage_bodies, observe_body, tree_sum = mpe.team_phases(c)
    N, OBS_DIM, SLOTS, MAX_CYCLES = c.NUM_AGENTS, c.OBS_DIM, c.SUM_SLOTS, c.MAX_CYCLES
    SENSITIVITY, DIST_MIN, REACH2 = c.SENSITIVITY, c.DIST_MIN, c.REACH2
    GLOBAL_WEIGHT, LOCAL_RATIO = c.GLOBAL_WEIGHT, c.LOCAL_RATIO
    action_force = mpe.continuous_action_force if c.CONTINUOUS_ACTIONS else mpe.discrete_action_force
    ZERO = np.float32(0.0)

    SCRATCH = max(6 * N, 2 * N + SLOTS)  # the .cu's scratch, which says what it holds when

    @cuda.jit(device=True)
    def shared():
        # The agents' positions (before the move, then after it); each landmark's nearest distance;
        # the observations' bodies: views of one scratch row, as the .cu's.
        scratch = cuda.shared.array((GAMES, SCRATCH), float32)[team()]
        return scratch[:N], scratch[N : 2 * N], scratch[2 * N : 2 * N + SLOTS], scratch

    @inline_device
    def known_shapes(state):
        # The state's rows are N long (the .cu's e * N, a constant): Numba indexes x[e, a] through
        # x's shape, read at run time, a 64-bit product per array and access (docs/custom_env.md,
        # "Numba as fast as CUDA C", rule 5). The framework allocates exactly these shapes.
        x, y, vx, vy, landmark_x, landmark_y, _ = state
        assume(x.shape[1] == N)
        assume(y.shape[1] == N)
        assume(vx.shape[1] == N)
        assume(vy.shape[1] == N)
        assume(landmark_x.shape[1] == N)
        assume(landmark_y.shape[1] == N)

    @cuda.jit(device=True)
    def reset_env(state, sh, e, seed, episode):
        x, y, vx, vy, landmark_x, landmark_y, t = state
        known_shapes(state)
        a = lane()
        while a < U(N):
            x[e, a] = uniform(seed, episode, a, LOW, HIGH)
            y[e, a] = uniform(seed, episode, N + a, LOW, HIGH)
            vx[e, a] = ZERO
            vy[e, a] = ZERO
            landmark_x[e, a] = uniform(seed, episode, 2 * N + a, LOW, HIGH)
            landmark_y[e, a] = uniform(seed, episode, 3 * N + a, LOW, HIGH)
            a = U(a + lanes())
        if lane() == 0:
            t[e] = 0

    @cuda.jit(device=True)
    def step_env(state, sh, e, actions, rewards):
        x, y, vx, vy, landmark_x, landmark_y, t = state
        sx, sy, sums, _ = sh
        known_shapes(state)
        stage(x, y, sx, sy, e, N)
        a = lane()
        while a < U(N):
            fx, fy = action_force(actions, e, a, SENSITIVITY)
            # Unsigned while loops over a game's agents here and below: Numba kept range's int64
            # counter (not unrolled) and a negative index's wraparound on the shared arrays.
            j = U(0)
            while j < U(N):
                if j != a:
                    fx, fy = mpe.contact(sx[a] - sx[j], sy[a] - sy[j], DIST_MIN, REACH2, fx, fy)
                j = U(j + U(1))
            nx, ny, nvx, nvy = mpe.integrate(x[e, a], y[e, a], vx[e, a], vy[e, a], fx, fy, ZERO)
            x[e, a] = nx
            y[e, a] = ny
            vx[e, a] = nvx
            vy[e, a] = nvy
            a = U(a + lanes())
        sync()  # every agent has moved and read the old positions
        stage(x, y, sx, sy, e, N)
        lm = lane()
        while lm < U(SLOTS):
            nearest = ZERO
            if lm < N:
                lx, ly = landmark_x[e, lm], landmark_y[e, lm]
                nearest = mpe.squared_norm(sx[0] - lx, sy[0] - ly)
                a = U(1)
                while a < U(N):
                    nearest = min(nearest, mpe.squared_norm(sx[a] - lx, sy[a] - ly))
                    a = U(a + U(1))
                nearest = np.float32(math.sqrt(nearest))
            sums[lm] = nearest
            lm = U(lm + lanes())
        tree_sum(sums, SLOTS)
        total = -sums[0]
        a = lane()
        while a < U(N):
            count = np.int32(0)  # int32, as the .cu's (Numba's int is 64-bit)
            j = U(0)
            while j < U(N):
                d2 = mpe.squared_norm(sx[j] - sx[a], sy[j] - sy[a])
                if j != a and d2 < REACH2 and np.float32(math.sqrt(d2)) < DIST_MIN:
                    count = np.int32(count + np.int32(1))
                j = U(j + U(1))
            rewards[e, a] = add_rn(mul_rn(total, GLOBAL_WEIGHT), mul_rn(-np.float32(count), LOCAL_RATIO))
            a = U(a + lanes())
        now = np.int32(t[e] + np.int32(1))
        sync()  # every thread has read t and the tree's sum
        if lane() == 0:
            t[e] = now
        return False, now >= MAX_CYCLES

    @cuda.jit(device=True)
    def observe_env(state, sh, e, obs, masks):
        x, y, vx, vy, landmark_x, landmark_y, t = state
        bodies = sh[3]
        known_shapes(state)
        assume(obs.shape[1] == N * OBS_DIM)
        stage_bodies(x, y, vx, vy, landmark_x, landmark_y, e, N, N, bodies)
        # Unsigned agent indices (U); the team's loops count in int64 (numba_api.I64 says why).
        a = U(0)
        while a < U(N):
            row = U(a * U(OBS_DIM))
            observe_body(bodies, N, N, a, obs, e, row)
            q = I64(lane())
            while q < I64(2 * (N - 1)):  # the silent agents' communication
                obs[e, I64(row) + I64(4 + 4 * N - 2) + q] = ZERO
                q += I64(lanes())
            a = U(a + U(1))

    return GameFunctions(reset_env, step_env, observe_env, shared=shared)
