"""SimpleTag-v3's Numba kernels: the device functions of simple_tag.cu (which says how the block's
threads share the work), for the constants ``c`` of gpu_marl_envs/envs/simple_tag.py (the reference,
which documents the rules); the physics is kernels/mpe_numba.py."""

import math

import numpy as np
from gpu_marl_envs.kernels import mpe_numba as mpe
from gpu_marl_envs.kernels.multi_agent_numba import GameFunctions, team_functions
from gpu_marl_envs.kernels.numba_api import I64, U, add_rn, assume, cuda, inline_device, mul_rn
from gpu_marl_envs.kernels.rng_numba import uniform
from numba import float32, int32

# Written with team_functions(c): the backend packs several games to a block, as CUDA C does.
PACKS_GAMES = True

LOW, HIGH = np.float32(-1.0), np.float32(1.0)


def game_functions(c) -> GameFunctions:
    team, lane, lanes, sync = team_functions(c)  # this game's team of lanes (packed: PACKS_GAMES)
    GAMES = c.GME_GAMES_PER_BLOCK
    stage, stage_bodies, observe_body, _ = mpe.team_phases(c)
    N, A, L, MAX_CYCLES = c.NUM_AGENTS, c.NUM_ADVERSARIES, c.NUM_OBSTACLES, c.MAX_CYCLES
    ADVERSARY_OBS_DIM, GOOD_OBS_DIM = c.ADVERSARY_OBS_DIM, c.GOOD_OBS_DIM
    ADVERSARY_ACCEL, GOOD_ACCEL = c.ADVERSARY_ACCEL, c.GOOD_ACCEL
    ADVERSARY_MAX_SPEED, GOOD_MAX_SPEED = c.ADVERSARY_MAX_SPEED, c.GOOD_MAX_SPEED
    DIST_MIN_AA, DIST_MIN_AG, DIST_MIN_GG = c.DIST_MIN_AA, c.DIST_MIN_AG, c.DIST_MIN_GG
    REACH2_AA, REACH2_AG, REACH2_GG = c.REACH2_AA, c.REACH2_AG, c.REACH2_GG
    DIST_MIN_AO, DIST_MIN_GO, REACH2_AO, REACH2_GO = c.DIST_MIN_AO, c.DIST_MIN_GO, c.REACH2_AO, c.REACH2_GO
    RANGE, CATCH_REWARD = c.OBSTACLE_RANGE, c.CATCH_REWARD
    BOUND_START, BOUND_WALL, BOUND_SLOPE = c.BOUND_START, c.BOUND_WALL, c.BOUND_SLOPE
    BOUND_MAX, BOUND_EXP_LIMIT = c.BOUND_MAX, c.BOUND_EXP_LIMIT
    ADVERSARY_FLOATS = A * ADVERSARY_OBS_DIM
    OBS_SIZE = ADVERSARY_FLOATS + (N - A) * GOOD_OBS_DIM
    action_force = mpe.continuous_action_force if c.CONTINUOUS_ACTIONS else mpe.discrete_action_force
    ZERO, TWO = np.float32(0.0), np.float32(2.0)

    BODIES = 4 * N + 2 * L  # mpe_numba.stage_bodies' layout

    @cuda.jit(device=True)
    def shared():
        # The agents' positions (before the move, then after it) as the start of the observations'
        # bodies (the .cu's layout); the catches. One array a line: the simulator tells shared arrays
        # apart by the line that declares them.
        bodies = cuda.shared.array((GAMES, BODIES), float32)[team()]
        caught = cuda.shared.array((GAMES, 1), int32)[team()]
        return bodies[:N], bodies[N : 2 * N], caught, bodies

    @inline_device
    def known_shapes(state):
        # The state's rows are N and L long (the .cu's e * N, a constant): Numba indexes x[e, a]
        # through x's shape, read at run time, a 64-bit product per array and access
        # (docs/custom_env.md, "Numba as fast as CUDA C", rule 5). The framework allocates exactly
        # these shapes.
        x, y, vx, vy, obstacle_x, obstacle_y, _ = state
        assume(x.shape[1] == N)
        assume(y.shape[1] == N)
        assume(vx.shape[1] == N)
        assume(vy.shape[1] == N)
        assume(obstacle_x.shape[1] == L)
        assume(obstacle_y.shape[1] == L)

    @cuda.jit(device=True)
    def reset_env(state, sh, e, seed, episode):
        x, y, vx, vy, obstacle_x, obstacle_y, t = state
        known_shapes(state)
        a = lane()
        while a < U(N):
            x[e, a] = uniform(seed, episode, a, LOW, HIGH)
            y[e, a] = uniform(seed, episode, N + a, LOW, HIGH)
            vx[e, a] = ZERO
            vy[e, a] = ZERO
            a = U(a + lanes())
        lm = lane()
        while lm < U(L):
            obstacle_x[e, lm] = uniform(seed, episode, 2 * N + lm, -RANGE, RANGE)
            obstacle_y[e, lm] = uniform(seed, episode, 2 * N + L + lm, -RANGE, RANGE)
            lm = U(lm + lanes())
        if lane() == 0:
            t[e] = 0

    @cuda.jit(device=True)
    def bound(v):
        if v < BOUND_START:
            return ZERO
        if v < BOUND_WALL:
            return mul_rn(add_rn(v, -BOUND_START), BOUND_SLOPE)
        arg = add_rn(mul_rn(v, TWO), -TWO)
        return min(mpe.mpe_exp(arg), BOUND_MAX) if arg < BOUND_EXP_LIMIT else BOUND_MAX

    @cuda.jit(device=True)
    def step_env(state, sh, e, actions, rewards):
        x, y, vx, vy, obstacle_x, obstacle_y, t = state
        sx, sy, caught, _ = sh
        known_shapes(state)
        if lane() == 0:
            caught[0] = 0
        stage(x, y, sx, sy, e, N)
        a = lane()
        while a < U(N):
            adversary = a < U(A)
            fx, fy = action_force(actions, e, a, ADVERSARY_ACCEL if adversary else GOOD_ACCEL)
            # Unsigned while loops over the other agents and the obstacles: Numba kept range's int64
            # counter (not unrolled) and a negative index's wraparound on the shared arrays.
            j = U(0)
            while j < U(N):
                if j != a:
                    both = adversary and j < U(A)
                    neither = not adversary and j >= U(A)
                    dist_min = DIST_MIN_AA if both else DIST_MIN_GG if neither else DIST_MIN_AG
                    reach2 = REACH2_AA if both else REACH2_GG if neither else REACH2_AG
                    fx, fy = mpe.contact(sx[a] - sx[j], sy[a] - sy[j], dist_min, reach2, fx, fy)
                j = U(j + U(1))
            lm = U(0)
            while lm < U(L):
                fx, fy = mpe.contact(
                    sx[a] - obstacle_x[e, lm],
                    sy[a] - obstacle_y[e, lm],
                    DIST_MIN_AO if adversary else DIST_MIN_GO,
                    REACH2_AO if adversary else REACH2_GO,
                    fx,
                    fy,
                )
                lm = U(lm + U(1))
            max_speed = ADVERSARY_MAX_SPEED if adversary else GOOD_MAX_SPEED
            nx, ny, nvx, nvy = mpe.integrate(x[e, a], y[e, a], vx[e, a], vy[e, a], fx, fy, max_speed)
            x[e, a] = nx
            y[e, a] = ny
            vx[e, a] = nvx
            vy[e, a] = nvy
            a = U(a + lanes())
        sync()  # every agent has moved and read the old positions
        stage(x, y, sx, sy, e, N)
        g = U(U(A) + lane())
        while g < U(N):
            count = np.int32(0)  # int32, as the .cu's (Numba's int is 64-bit)
            a = U(0)
            while a < U(A):
                d2 = mpe.squared_norm(sx[a] - sx[g], sy[a] - sy[g])
                if d2 < REACH2_AG and np.float32(math.sqrt(d2)) < DIST_MIN_AG:
                    count = np.int32(count + np.int32(1))
                a = U(a + U(1))
            if count:
                cuda.atomic.add(caught, 0, count)
            reward = np.float32(np.int32(-CATCH_REWARD * count))
            reward = add_rn(reward, -bound(abs(sx[g])))
            rewards[e, g] = add_rn(reward, -bound(abs(sy[g])))
            g = U(g + lanes())
        sync()  # every catch is counted
        a = lane()
        while a < U(A):
            rewards[e, a] = np.float32(np.int32(CATCH_REWARD * caught[0]))
            a = U(a + lanes())
        now = np.int32(t[e] + np.int32(1))
        sync()  # every thread has read t
        if lane() == 0:
            t[e] = now
        return False, now >= MAX_CYCLES

    VELOCITIES = 4 + 2 * L + 2 * (N - 1)  # the first of the good agents' velocities

    @cuda.jit(device=True)
    def observe_env(state, sh, e, obs, masks):
        x, y, vx, vy, obstacle_x, obstacle_y, t = state
        bodies = sh[3]
        known_shapes(state)
        assume(obs.shape[1] == OBS_SIZE)
        stage_bodies(x, y, vx, vy, obstacle_x, obstacle_y, e, N, L, bodies)
        # Unsigned agent indices (U); the team's loops count in int64 (numba_api.I64 says why).
        a = U(0)
        while a < U(N):
            adversary = a < U(A)
            if adversary:
                row, others = U(a * U(ADVERSARY_OBS_DIM)), U(N - A)
            else:
                row, others = U(U(ADVERSARY_FLOATS) + U(U(a - U(A)) * U(GOOD_OBS_DIM))), U(N - A - 1)
            observe_body(bodies, N, L, a, obs, e, row)
            q = I64(lane())
            while q < I64(2 * others):  # the other good agents' velocities, in id order
                g = I64(A) + (q >> I64(1))
                if not adversary and g >= I64(a):
                    g += I64(1)
                obs[e, I64(row) + I64(VELOCITIES) + q] = bodies[I64(2 * N) + (q & I64(1)) * I64(N) + g]
                q += I64(lanes())
            a = U(a + U(1))

    # The .cu's bound (mpe_physics.min_blocks_per_sm); a game of a block per env is not bounded.
    bounds = (c.GME_GAME_THREADS * c.GME_GAMES_PER_BLOCK, c.MIN_BLOCKS) if c.GME_GAMES_PER_BLOCK > 1 else None
    return GameFunctions(reset_env, step_env, observe_env, shared=shared, launch_bounds=bounds)
