"""SimpleSpread-v3's Numba kernels: the device functions of simple_spread.cu (which says how the
block's threads share the work), for the constants ``c`` of gpu_marl_envs/envs/simple_spread.py (the
reference, which documents the rules); the physics is kernels/mpe_numba.py."""

import math

import numpy as np
from gpu_marl_envs.kernels import mpe_numba as mpe
from gpu_marl_envs.kernels.multi_agent_numba import GameFunctions, team_functions, team_store
from gpu_marl_envs.kernels.numba_api import I64, U, add_rn, assume, cuda, inline_device, mul_rn
from gpu_marl_envs.kernels.rng_numba import uniform
from numba import float32, int32

# Written with team_functions(c): the backend packs several games to a block, as CUDA C does.
PACKS_GAMES = True

LOW, HIGH = np.float32(-1.0), np.float32(1.0)


def game_functions(c) -> GameFunctions:
    team, lane, lanes, sync = team_functions(c)  # this game's team of lanes (packed: PACKS_GAMES)
    GAMES = c.GME_GAMES_PER_BLOCK
    _, stage_bodies, observe_body, tree_sum = mpe.team_phases(c)
    N, OBS_DIM, SLOTS, MAX_CYCLES = c.NUM_AGENTS, c.OBS_DIM, c.SUM_SLOTS, c.MAX_CYCLES
    SENSITIVITY, DIST_MIN, REACH2 = c.SENSITIVITY, c.DIST_MIN, c.REACH2
    GLOBAL_WEIGHT, LOCAL_RATIO = c.GLOBAL_WEIGHT, c.LOCAL_RATIO
    action_force = mpe.continuous_action_force if c.CONTINUOUS_ACTIONS else mpe.discrete_action_force
    ZERO = np.float32(0.0)

    # The .cu's: a lane's rounds over the game's agents (its loops unrolled, the arrays in registers),
    # whether a game runs on one lane (step_alone), the levels of its landmarks' tree sum.
    ROUNDS, ONE_LANE = -(-N // c.GME_GAME_THREADS), c.GME_GAME_THREADS == 1
    TREE_LEVELS = SLOTS.bit_length() - 1
    COLLIDE_D2 = c.COLLIDE_D2
    SHARED_ROW = 6 * N + SLOTS  # a team's floats: a constant, as shared.array's shape must be
    # Whether the warp stores the moved bodies (the .cu's store_warp), and how a field's rows.
    WARP_STORES = c.GME_WARP_STORES
    store_rows = team_store(c, N)
    add_contacts = mpe.contacts(N) if ONE_LANE else None  # (step_alone's, built for one lane only)

    @cuda.jit(device=True)
    def shared():
        # The .cu's Shared: the game's bodies (stage_bodies' layout), then the landmarks' sums; and
        # the block's teams' rows (for store_warp).
        block = cuda.shared.array((GAMES, SHARED_ROW), float32)
        team_row = block[team()]
        return team_row[: 6 * N], team_row[6 * N :], block

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
        bodies = sh[0]
        known_shapes(state)
        a = lane()
        while a < U(N):
            px, py = uniform(seed, episode, a, LOW, HIGH), uniform(seed, episode, N + a, LOW, HIGH)
            lx, ly = uniform(seed, episode, 2 * N + a, LOW, HIGH), uniform(seed, episode, 3 * N + a, LOW, HIGH)
            x[e, a] = bodies[a] = px
            y[e, a] = bodies[U(N) + a] = py
            vx[e, a] = bodies[U(2 * N) + a] = ZERO
            vy[e, a] = bodies[U(3 * N) + a] = ZERO
            landmark_x[e, a] = bodies[U(4 * N) + a] = lx
            landmark_y[e, a] = bodies[U(5 * N) + a] = ly
            a = U(a + lanes())
        if lane() == 0:
            t[e] = 0

    @cuda.jit(device=True)
    def step_alone(state, sh, e, actions, rewards):
        # The .cu's step_alone: a game on one thread, the whole step in registers (the local arrays'
        # loops over the constant N unroll), each contact and collision pair once, the bodies it leaves
        # written to the shared row for observe_env. Returns the step's t.
        x, y, vx, vy, landmark_x, landmark_y, t = state
        bodies = sh[0]
        known_shapes(state)
        now = np.int32(t[e] + np.int32(1))
        fx = cuda.local.array(N, float32)
        fy = cuda.local.array(N, float32)
        px = cuda.local.array(N, float32)
        py = cuda.local.array(N, float32)
        pvx = cuda.local.array(N, float32)
        pvy = cuda.local.array(N, float32)
        lx = cuda.local.array(N, float32)
        ly = cuda.local.array(N, float32)
        for a in range(N):
            fx[a], fy[a] = action_force(actions, e, U(a), SENSITIVITY)
            px[a], py[a], pvx[a], pvy[a] = x[e, U(a)], y[e, U(a)], vx[e, U(a)], vy[e, U(a)]
            lx[a], ly[a] = landmark_x[e, U(a)], landmark_y[e, U(a)]
        add_contacts(px, py, DIST_MIN, REACH2, fx, fy)
        for a in range(N):
            px[a], py[a], pvx[a], pvy[a] = mpe.integrate(px[a], py[a], pvx[a], pvy[a], fx[a], fy[a], ZERO)
            if not WARP_STORES:
                x[e, U(a)], y[e, U(a)], vx[e, U(a)], vy[e, U(a)] = px[a], py[a], pvx[a], pvy[a]
            bodies[a] = px[a]
            bodies[N + a] = py[a]
            bodies[2 * N + a] = pvx[a]
            bodies[3 * N + a] = pvy[a]
            bodies[4 * N + a] = lx[a]
            bodies[5 * N + a] = ly[a]
        sums = cuda.local.array(SLOTS, float32)
        for lm in range(SLOTS):
            sums[lm] = ZERO
            if lm < N:
                nearest = mpe.squared_norm(px[0] - lx[lm], py[0] - ly[lm])
                for a in range(1, N):
                    nearest = min(nearest, mpe.squared_norm(px[a] - lx[lm], py[a] - ly[lm]))
                sums[lm] = np.float32(math.sqrt(nearest))
        # mpe_tree_sum's order: both loops' counts constant, so that LLVM unrolls them and the guard folds.
        for level in range(TREE_LEVELS):
            for k in range(SLOTS // 2):
                if k < SLOTS >> (level + 1):
                    sums[k] = add_rn(sums[k], sums[k + (SLOTS >> (level + 1))])
        count = cuda.local.array(N, int32)
        for a in range(N):
            count[a] = np.int32(0)
        for a in range(N):
            for j in range(a + 1, N):
                # sqrt(d2) < DIST_MIN exactly where d2 < COLLIDE_D2 (mpe_physics.below_sqrt).
                if mpe.squared_norm(px[j] - px[a], py[j] - py[a]) < COLLIDE_D2:
                    count[a] = np.int32(count[a] + np.int32(1))
                    count[j] = np.int32(count[j] + np.int32(1))
        for a in range(N):
            rewards[e, U(a)] = reward(-sums[0], count[a])
        t[e] = now
        return now

    @inline_device
    def reward(total, count):
        return add_rn(mul_rn(total, GLOBAL_WEIGHT), mul_rn(-np.float32(count), LOCAL_RATIO))

    @cuda.jit(device=True)
    def step_team(state, sh, e, actions, rewards):
        # The .cu's step_team. Returns the step's t.
        x, y, vx, vy, landmark_x, landmark_y, t = state
        bodies, sums, _ = sh
        known_shapes(state)
        now = np.int32(t[e] + np.int32(1))
        fx = cuda.local.array(ROUNDS, float32)
        fy = cuda.local.array(ROUNDS, float32)
        nx = cuda.local.array(ROUNDS, float32)
        ny = cuda.local.array(ROUNDS, float32)
        for k in range(ROUNDS):  # the action forces, loaded before the staging (the .cu says why)
            a = U(lane() + U(k) * lanes())
            if a < U(N):
                fx[k], fy[k] = action_force(actions, e, a, SENSITIVITY)
        stage_bodies(x, y, vx, vy, landmark_x, landmark_y, e, N, N, bodies)
        for k in range(ROUNDS):
            a = U(lane() + U(k) * lanes())
            if a < U(N):
                # Unsigned while loops over a game's agents here and below: Numba kept range's
                # int64 counter (not unrolled) and a negative index's wraparound on the shared arrays.
                j = U(0)
                while j < U(N):
                    if j != a:
                        fx[k], fy[k] = mpe.contact(
                            bodies[a] - bodies[j],
                            bodies[U(N) + a] - bodies[U(N) + j],
                            DIST_MIN,
                            REACH2,
                            fx[k],
                            fy[k],
                        )
                    j = U(j + U(1))
        for k in range(ROUNDS):
            a = U(lane() + U(k) * lanes())
            if a < U(N):
                px, py, pvx, pvy = mpe.integrate(
                    bodies[a], bodies[U(N) + a], bodies[U(2 * N) + a], bodies[U(3 * N) + a], fx[k], fy[k], ZERO
                )
                if not WARP_STORES:
                    x[e, a], y[e, a], vx[e, a], vy[e, a] = px, py, pvx, pvy
                nx[k], ny[k] = px, py
                bodies[U(2 * N) + a] = pvx
                bodies[U(3 * N) + a] = pvy
        sync()  # every agent has read the old positions
        for k in range(ROUNDS):
            a = U(lane() + U(k) * lanes())
            if a < U(N):
                bodies[a] = nx[k]
                bodies[U(N) + a] = ny[k]
        sync()  # the new positions are staged
        lm = lane()
        while lm < U(SLOTS):
            nearest = ZERO
            if lm < N:
                lx, ly = bodies[U(4 * N) + lm], bodies[U(5 * N) + lm]
                nearest = mpe.squared_norm(bodies[0] - lx, bodies[N] - ly)
                a = U(1)
                while a < U(N):
                    nearest = min(nearest, mpe.squared_norm(bodies[a] - lx, bodies[U(N) + a] - ly))
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
                # sqrt(d2) < DIST_MIN exactly where d2 < COLLIDE_D2 (mpe_physics.below_sqrt).
                d2 = mpe.squared_norm(bodies[j] - bodies[a], bodies[U(N) + j] - bodies[U(N) + a])
                if j != a and d2 < COLLIDE_D2:
                    count = np.int32(count + np.int32(1))
                j = U(j + U(1))
            rewards[e, a] = reward(total, count)
            a = U(a + lanes())
        if lane() == 0:
            t[e] = now  # every thread read t before the staging's barrier
        return now

    # Chosen here, not in step_env: Numba would compile both (step_alone's loops unrolled over N agents).
    step_game = step_alone if ONE_LANE else step_team

    @cuda.jit(device=True)
    def step_env(state, sh, e, actions, rewards):
        return False, step_game(state, sh, e, actions, rewards) >= MAX_CYCLES

    @cuda.jit(device=True)
    def observe_env(state, sh, e, obs, masks):
        bodies = sh[0]  # as the step or the reset left them (the .cu's observe_env says why)
        assume(obs.shape[1] == N * OBS_DIM)
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

    @cuda.jit(device=True)
    def store_warp(state, sh, warp):
        # The .cu's store_warp: each field's rows from the block's teams' bodies.
        x, y, vx, vy, _, _, _ = state
        block = sh[2]
        store_rows(x, block, U(0), warp)
        store_rows(y, block, U(N), warp)
        store_rows(vx, block, U(2 * N), warp)
        store_rows(vy, block, U(3 * N), warp)

    # Stepped before needs_reset is known: the .cu's speculative_step says why it may be.
    return GameFunctions(reset_env, step_env, observe_env, shared=shared, store_warp=store_warp, speculative_step=True)
