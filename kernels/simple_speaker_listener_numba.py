"""SimpleSpeakerListener-v4's Numba kernels: the device functions of simple_speaker_listener.cu (thread 0
steps the game, the block writes the observations), for the constants ``c`` of
gpu_marl_envs/envs/simple_speaker_listener.py (the reference, which documents the rules)."""

import math

import numpy as np
from gpu_marl_envs.kernels import mpe_numba as mpe
from gpu_marl_envs.kernels.multi_agent_numba import GameFunctions, team_functions
from gpu_marl_envs.kernels.numba_api import U, assume, cuda, inline_device
from gpu_marl_envs.kernels.rng_numba import uniform

# Written with team_functions(c): the backend packs several games to a block, as CUDA C does.
PACKS_GAMES = True

LOW, HIGH = np.float32(-1.0), np.float32(1.0)


def game_functions(c) -> GameFunctions:
    _, lane, lanes, sync = team_functions(c)  # this game's team of lanes (packed: PACKS_GAMES)
    M, C, MAX_CYCLES, GOAL_DRAW = c.NUM_LANDMARKS, c.COMM_DIM, c.MAX_CYCLES, c.GOAL_DRAW
    SENSITIVITY, COLORS = c.SENSITIVITY, c.LANDMARK_COLORS
    OBS_SIZE = 3 + 2 + 2 * M + C
    ZERO, ONE, THREE = np.float32(0.0), np.float32(1.0), np.float32(3.0)
    action_force = mpe.continuous_action_force if c.CONTINUOUS_ACTIONS else mpe.discrete_action_force

    # The speaker's utterance, chosen here: each action mode's arrays type only its own function.
    if c.CONTINUOUS_ACTIONS:

        @cuda.jit(device=True)
        def utter(actions, e, comm):  # the utterance itself, the speaker's first C values
            for k in range(C):
                comm[e, k] = mpe.unit(actions[e, 0, k])

    else:

        @cuda.jit(device=True)
        def utter(actions, e, comm):  # the one-hot vector of the word said
            word = min(max(actions[e, 0], 0), C - 1)
            for k in range(C):
                comm[e, k] = ONE if k == word else ZERO

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
        known_shapes(state)
        if lane() != 0:
            return
        for a in range(2):
            x[e, a] = uniform(seed, episode, a, LOW, HIGH)
            y[e, a] = uniform(seed, episode, 2 + a, LOW, HIGH)
            vx[e, a] = ZERO
            vy[e, a] = ZERO
        for lm in range(M):
            landmark_x[e, lm] = uniform(seed, episode, 4 + lm, LOW, HIGH)
            landmark_y[e, lm] = uniform(seed, episode, 4 + M + lm, LOW, HIGH)
        goal[e] = min(math.floor(uniform(seed, episode, GOAL_DRAW, ZERO, THREE)), M - 1)
        for k in range(C):
            comm[e, k] = ZERO
        t[e] = 0

    @cuda.jit(device=True)
    def step_env(state, sh, e, actions, rewards):
        x, y, vx, vy, landmark_x, landmark_y, goal, comm, t = state
        known_shapes(state)
        now = np.int32(t[e] + np.int32(1))
        sync()  # every thread has read t
        if lane() == 0:
            utter(actions, e, comm)
            ux, uy = action_force(actions, e, 1, SENSITIVITY)
            nx, ny, nvx, nvy = mpe.integrate(x[e, 1], y[e, 1], vx[e, 1], vy[e, 1], ux, uy, ZERO)
            x[e, 1] = nx
            y[e, 1] = ny
            vx[e, 1] = nvx
            vy[e, 1] = nvy
            g = U(goal[e])  # an unsigned index (0 .. M - 1): no negative index's wraparound
            reward = -mpe.squared_norm(nx - landmark_x[e, g], ny - landmark_y[e, g])
            rewards[e, 0] = reward
            rewards[e, 1] = reward
            t[e] = now
        return False, now >= MAX_CYCLES

    @cuda.jit(device=True)
    def observe_env(state, sh, e, obs, masks):
        x, y, vx, vy, landmark_x, landmark_y, goal, comm, t = state
        known_shapes(state)
        assume(obs.shape[1] == OBS_SIZE)
        # Unsigned indices throughout (U): Numba's int64 floor division and remainder would cost
        # sign fix-ups and 64-bit arithmetic here (docs/custom_env.md, "Numba as fast as CUDA C").
        k = lane()
        while k < U(OBS_SIZE):
            if k < U(3):
                value = COLORS[U(U(U(3) * U(goal[e])) + k)]  # the speaker's: the goal's colour
            elif k < U(5):
                value = vx[e, 1] if k == U(3) else vy[e, 1]
            elif k < U(5 + 2 * M):
                lm = U(U(k - U(5)) // U(2))
                value = landmark_x[e, lm] - x[e, 1] if U(k % U(2)) == U(1) else landmark_y[e, lm] - y[e, 1]
            else:
                value = comm[e, U(k - U(5 + 2 * M))]
            obs[e, k] = value
            k = U(k + lanes())

    return GameFunctions(reset_env, step_env, observe_env)
