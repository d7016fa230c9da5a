"""SimpleSpeakerListener-v4's Numba kernels: the device functions of simple_speaker_listener.cu (a game on
one lane, its step in registers, the observations from what it left in shared memory), for the
constants ``c`` of gpu_marl_envs/envs/simple_speaker_listener.py (the reference, which documents the
rules)."""

import math

import numpy as np
from gpu_marl_envs.kernels import mpe_numba as mpe
from gpu_marl_envs.kernels.multi_agent_numba import GameFunctions, team_functions
from gpu_marl_envs.kernels.numba_api import U, assume, cuda, inline_device
from gpu_marl_envs.kernels.rng_numba import uniform
from numba import float32

# Written with team_functions(c): the backend packs several games to a block, as CUDA C does.
PACKS_GAMES = True

LOW, HIGH = np.float32(-1.0), np.float32(1.0)


def game_functions(c) -> GameFunctions:
    team, _, _, _ = team_functions(c)  # this game's team: one lane (packed: PACKS_GAMES)
    if c.GME_GAME_THREADS != 1:
        raise ValueError(f"a speaker-listener game runs on one lane, not {c.GME_GAME_THREADS}")
    GAMES, M, C, MAX_CYCLES, GOAL_DRAW = c.GME_GAMES_PER_BLOCK, c.NUM_LANDMARKS, c.COMM_DIM, c.MAX_CYCLES, c.GOAL_DRAW
    SENSITIVITY, COLORS = c.SENSITIVITY, c.LANDMARK_COLORS
    OBS_SIZE = 3 + 2 + 2 * M + C
    ZERO, ONE, THREE = np.float32(0.0), np.float32(1.0), np.float32(3.0)
    action_force = mpe.continuous_action_force if c.CONTINUOUS_ACTIONS else mpe.discrete_action_force
    # The .cu's Shared, a team's row of floats in two parts: the listener's body (x, y, vx, vy), and
    # the rest: the landmarks' x then y, the utterance, the goal (a float: 0, 1 or 2 exactly).
    LANDMARK_X, LANDMARK_Y, COMM, GOAL = 0, M, 2 * M, 2 * M + C
    SHARED_ROW = 4 + GOAL + 1  # a constant, as shared.array's shape must be

    @cuda.jit(device=True)
    def shared():
        # Slices of the team's row, as SimpleSpread's Shared. Returned as the row itself (a 1-tuple),
        # the observations came out wrong on an H200: NVVM had resolved observe_env's load of vy to
        # the step's store of the last landmark's y (in the PTX, numba-cuda 0.30), where the slices'
        # loads read what the step stored.
        block = cuda.shared.array((GAMES, SHARED_ROW), float32)
        team_row = block[team()]
        return team_row[:4], team_row[4:]

    # The speaker's utterance, chosen here: each action mode's arrays type only its own function.
    if c.CONTINUOUS_ACTIONS:

        @cuda.jit(device=True)
        def utter(actions, e, comm):  # the utterance itself, the speaker's first C values
            for k in range(C):
                comm[k] = mpe.unit(actions[e, 0, k])

    else:

        @cuda.jit(device=True)
        def utter(actions, e, comm):  # the one-hot vector of the word said
            word = min(max(actions[e, 0], 0), C - 1)
            for k in range(C):
                comm[k] = ONE if k == word else ZERO

    @inline_device
    def known_shapes(state):
        # The state's rows are constants long (the .cu's e * 2): Numba indexes x[e, a] through x's
        # shape, read at run time, a 64-bit product per array and access (docs/custom_env.md, "Numba
        # as fast as CUDA C", rule 5). The framework allocates exactly these shapes.
        x, y, vx, vy, landmark_x, landmark_y, _, comm, _ = state
        assume(x.shape[1] == 2)
        assume(y.shape[1] == 2)
        assume(vx.shape[1] == 2)
        assume(vy.shape[1] == 2)
        assume(landmark_x.shape[1] == M)
        assume(landmark_y.shape[1] == M)
        assume(comm.shape[1] == C)

    @cuda.jit(device=True)
    def reset_env(state, sh, e, seed, episode):
        x, y, vx, vy, landmark_x, landmark_y, goal, comm, t = state
        body, rest = sh
        known_shapes(state)
        for a in range(2):
            px, py = uniform(seed, episode, a, LOW, HIGH), uniform(seed, episode, 2 + a, LOW, HIGH)
            x[e, a] = px
            y[e, a] = py
            vx[e, a] = ZERO
            vy[e, a] = ZERO
            if a == 1:
                body[0] = px
                body[1] = py
        body[2] = ZERO
        body[3] = ZERO
        for lm in range(M):
            landmark_x[e, lm] = rest[LANDMARK_X + lm] = uniform(seed, episode, 4 + lm, LOW, HIGH)
            landmark_y[e, lm] = rest[LANDMARK_Y + lm] = uniform(seed, episode, 4 + M + lm, LOW, HIGH)
        goal[e] = g = min(math.floor(uniform(seed, episode, GOAL_DRAW, ZERO, THREE)), M - 1)
        rest[GOAL] = g
        for k in range(C):
            comm[e, k] = rest[COMM + k] = ZERO
        t[e] = 0

    @cuda.jit(device=True)
    def step_env(state, sh, e, actions, rewards):
        # The .cu's step_env: every load first, then the step in registers (the local arrays' loops
        # over constants unroll), what the observations read left in the shared row.
        x, y, vx, vy, landmark_x, landmark_y, goal, comm, t = state
        body, rest = sh
        known_shapes(state)
        now = np.int32(t[e] + np.int32(1))
        g = goal[e]
        px, py, pvx, pvy = x[e, 1], y[e, 1], vx[e, 1], vy[e, 1]
        lx = cuda.local.array(M, float32)
        ly = cuda.local.array(M, float32)
        for lm in range(M):
            lx[lm] = landmark_x[e, lm]
            ly[lm] = landmark_y[e, lm]
        said = cuda.local.array(C, float32)
        utter(actions, e, said)
        ux, uy = action_force(actions, e, 1, SENSITIVITY)
        px, py, pvx, pvy = mpe.integrate(px, py, pvx, pvy, ux, uy, ZERO)
        goal_x, goal_y = lx[0], ly[0]  # the goal's landmark, picked among the loaded ones
        for lm in range(1, M):
            goal_x = lx[lm] if g == lm else goal_x
            goal_y = ly[lm] if g == lm else goal_y
        reward = -mpe.squared_norm(px - goal_x, py - goal_y)
        x[e, 1] = body[0] = px
        y[e, 1] = body[1] = py
        vx[e, 1] = body[2] = pvx
        vy[e, 1] = body[3] = pvy
        for lm in range(M):
            rest[LANDMARK_X + lm] = lx[lm]
            rest[LANDMARK_Y + lm] = ly[lm]
        for k in range(C):
            comm[e, k] = rest[COMM + k] = said[k]
        rest[GOAL] = g
        rewards[e, 0] = reward
        rewards[e, 1] = reward
        t[e] = now
        return False, now >= MAX_CYCLES

    @cuda.jit(device=True)
    def observe_env(state, sh, e, obs, masks):
        body, rest = sh  # as the step or the reset left them
        assume(obs.shape[1] == OBS_SIZE)
        vx, vy = body[2], body[3]
        g = U(rest[GOAL])  # an unsigned index (0 .. M - 1): no negative index's wraparound
        for k in range(3):  # the speaker's: the goal's colour
            obs[e, k] = COLORS[U(U(U(3) * g) + U(k))]
        obs[e, 3] = vx
        obs[e, 4] = vy
        for lm in range(M):
            obs[e, 5 + 2 * lm] = rest[LANDMARK_X + lm] - body[0]
            obs[e, 6 + 2 * lm] = rest[LANDMARK_Y + lm] - body[1]
        for k in range(C):
            obs[e, 5 + 2 * M + k] = rest[COMM + k]

    # Not stepped before needs_reset is known, as the .cu's is (speculative_step): on an H200, stepped so,
    # this step took 3.50 µs against 3.36 with Box actions at 2,000 games, and 5.81 against 5.51 at 65,536.
    return GameFunctions(reset_env, step_env, observe_env, shared=shared)
