"""TagGridworld Numba kernels, the twin of tag_gridworld.cu (read it for the design); the torch
reference is gpu_marl_envs/envs/tag_gridworld.py.

``game_functions(c)`` takes ``tag_gridworld.kernel_constants(params)`` (typed) and returns this
game's device functions for the multi-agent template's kernels (``multi_agent_numba.py``: a block
per env, autoreset, returns), agent ``a`` handled by thread ``a % blockDim.x``, the cells staged in
shared memory. Arrays have their natural shapes: x, y (E, N) int32, observations (E, N * obs_dim) float32.

Race freedom, as in the .cu: in each phase a thread writes only the agents it handles; what other
threads read (the cells after the moves) is staged in shared memory before a barrier; the tag is a
``syncthreads_or`` and the runner's nearest tagger an integer ``atomic.min``, the same in any order.
The only float32 arithmetic is one division per feature and one subtraction per reward (each
correctly rounded, no product to fuse), so GPU and simulator agree bit for bit.
"""

import math

import numpy as np
from gpu_marl_envs.kernels import rng_numba
from gpu_marl_envs.kernels.multi_agent_numba import GameFunctions
from gpu_marl_envs.kernels.numba_api import U, assume, cuda
from numba import int32, int64

# Actions (the reference's STAY, PLUS_X, MINUS_X, PLUS_Y, MINUS_Y).
PLUS_X, MINUS_X, PLUS_Y, MINUS_Y = 1, 2, 3, 4  # MINUS_Y the last: clamping maps the actions above it to it

# The runner's nearest tagger is the least key (squared distance << ID_BITS) | id, as in the .cu file.
ID_BITS = 14
ID_MASK = (1 << ID_BITS) - 1
NO_KEY = np.iinfo(np.int64).max


def game_functions(c) -> GameFunctions:
    """This game's device functions for the constants ``c`` (``kernel_constants``, typed)."""
    n = c.NUM_AGENTS
    g_count = c.NUM_TAGGERS
    runner = n - 1
    grid_length = c.GRID_LENGTH
    episode_length = c.EPISODE_LENGTH
    obs_dim = c.OBS_DIM
    full_observation = c.FULL_OBSERVATION
    random_start = c.RANDOM_START
    wall_hit_penalty = c.WALL_HIT_PENALTY
    tag_reward = c.TAG_REWARD_FOR_TAGGER
    tag_penalty = c.TAG_PENALTY_FOR_RUNNER
    step_cost = c.STEP_COST_FOR_TAGGER
    if n > 1 << ID_BITS:
        raise ValueError(f"TagGridworld kernels support at most {1 << ID_BITS} agents, got {n}")
    obs_size = n * obs_dim
    start_cell = grid_length // 2
    LOW_CELL, HIGH_CELL = np.int32(0), np.int32(grid_length)  # the grid's cells, as int32 bounds
    cells_float = np.float32(grid_length)
    draw_high = np.float32(grid_length + 1)
    steps_float = np.float32(episode_length)
    zero = np.float32(0.0)
    one = np.float32(1.0)
    # Unsigned twins of the counts, for indices and loops (docs/custom_env.md, "Numba as fast as CUDA C").
    N, G, RUNNER, OBS_DIM, OBS_SIZE = U(n), U(g_count), U(runner), U(obs_dim), U(obs_size)

    @cuda.jit(device=True)
    def scaled(cell):
        return np.float32(cell) / cells_float

    @cuda.jit(device=True)
    def shared():
        sx = cuda.shared.array(n, dtype=int32)  # cells after this step's moves (or after a reset)
        sy = cuda.shared.array(n, dtype=int32)
        nearest = cuda.shared.array(1, dtype=int64)  # least nearest-tagger key (partial observation only)
        return sx, sy, nearest

    @cuda.jit(device=True)
    def known_shapes(x, y):
        # The rows' length, for the compiler (docs/custom_env.md, "Numba as fast as CUDA C", rule 5):
        # Numba would read it from each array's shape at run time, a 64-bit product per array.
        assume(x.shape[1] == N)
        assume(y.shape[1] == N)

    @cuda.jit(device=True)
    def drawn_cell(seed, episode, draw):
        # The min catches a draw rounded up to L + 1. (np.int32: Numba's floor is int64, which beside
        # L compiled to a min in float64 and a conversion.)
        return min(np.int32(math.floor(rng_numba.uniform(seed, episode, draw, zero, draw_high))), HIGH_CELL)

    @cuda.jit(device=True)
    def reset_env(state, sh, e, seed, episode):
        x, y, t = state
        sx, sy = sh[0], sh[1]
        known_shapes(x, y)
        a = U(cuda.threadIdx.x)
        while a < N:
            if random_start:
                # Agent a: x from draw 2 a, y from draw 2 a + 1 (unsigned: 2 * a + 1 would be 64-bit).
                cx = drawn_cell(seed, episode, U(a * U(2)))
                cy = drawn_cell(seed, episode, U(U(a * U(2)) + U(1)))
            else:
                cx = 0 if a == RUNNER else start_cell
                cy = cx
            x[e, a] = cx
            y[e, a] = cy
            sx[a] = cx
            sy[a] = cy
            a = U(a + U(cuda.blockDim.x))
        if cuda.threadIdx.x == 0:
            t[e] = 0

    @cuda.jit(device=True)
    def first_word():
        """This thread's first observation word k, its row i and feature f (k = i * obs_dim + f),
        and the rows and features that a pass's stride of blockDim.x words moves them by."""
        k = U(cuda.threadIdx.x)
        threads = U(cuda.blockDim.x)
        i = U(k // OBS_DIM)
        rows_step = U(threads // OBS_DIM)
        return k, i, U(k - U(i * OBS_DIM)), rows_step, U(threads - U(rows_step * OBS_DIM))

    @cuda.jit(device=True)
    def next_word(i, f, rows_step, features_step):
        """(row, feature) of the word a stride further on. The loops over the words carry these
        rather than dividing each word's index: a division and a remainder by obs_dim per pass,
        some 20 instructions of the full observation's pass."""
        f = U(f + features_step)
        if f >= OBS_DIM:
            return U(i + U(rows_step + U(1))), U(f - OBS_DIM)
        return U(i + rows_step), f

    @cuda.jit(device=True)
    def observe_env(state, sh, e, obs, masks):
        # Observations of env e (the staged cells current and visible to the whole block), written
        # in consecutive words. No action masks in this game.
        t = state[2]
        sx, sy, nearest = sh
        assume(obs.shape[1] == OBS_SIZE)  # the rows' length a constant (custom_env.md's rule 5)
        time = np.float32(t[e]) / steps_float
        if full_observation:
            # Row i: [x_j / L (N), y_j / L (N), type_j (N), one-hot(i) (N), t / T].
            k, i, f, rows_step, features_step = first_word()
            while k < OBS_SIZE:
                if f < U(2 * N):
                    # One division for both coordinates' features: a call to scaled in each branch
                    # compiled the division (its slow path too) twice.
                    value = scaled(sx[f] if f < N else sy[U(f - N)])
                elif f < U(3 * N):
                    value = one if U(f - U(2 * N)) == RUNNER else zero
                elif f < U(4 * N):
                    value = one if U(f - U(3 * N)) == i else zero
                else:
                    value = time
                obs[e, k] = value
                k = U(k + U(cuda.blockDim.x))
                i, f = next_word(i, f, rows_step, features_step)
        else:
            # The runner's target: its nearest tagger by exact integer squared distance (ties: lowest id).
            if cuda.threadIdx.x == 0:
                nearest[0] = NO_KEY
            cuda.syncthreads()
            best = np.int64(NO_KEY)
            g = U(cuda.threadIdx.x)
            while g < G:
                dx = np.int64(np.int32(sx[g] - sx[RUNNER]))  # (the .cu's int difference, then widened)
                dy = np.int64(np.int32(sy[g] - sy[RUNNER]))
                key = ((dx * dx + dy * dy) << ID_BITS) | np.int64(g)
                best = min(best, key)
                g = U(g + U(cuda.blockDim.x))
            if best != NO_KEY:
                cuda.atomic.min(nearest, 0, best)
            cuda.syncthreads()
            nearest_id = U(nearest[0] & ID_MASK)
            # Row i: [own x / L, own y / L, target's x / L, target's y / L, own type, t / T].
            k, i, f, rows_step, features_step = first_word()
            while k < OBS_SIZE:
                target = RUNNER if i < G else nearest_id
                if f < U(4):
                    # One division for the four cells' features (as above).
                    j = i if f < U(2) else target
                    value = scaled(sx[j] if f % U(2) == U(0) else sy[j])
                elif f == U(4):
                    value = one if i == RUNNER else zero
                else:
                    value = time
                obs[e, k] = value
                k = U(k + U(cuda.blockDim.x))
                i, f = next_word(i, f, rows_step, features_step)

    @cuda.jit(device=True)
    def step_env(state, sh, e, actions, rewards):
        # Spec step 1: every agent moves one cell (actions clamped into range), clipped to [0, L]. The
        # reward slot holds the wall-hit penalty to subtract until the tag is known.
        x, y, t = state
        sx, sy = sh[0], sh[1]
        known_shapes(x, y)
        assume(actions.shape[1] == N)
        assume(rewards.shape[1] == N)
        tid = U(cuda.threadIdx.x)
        threads = U(cuda.blockDim.x)
        now = t[e] + 1
        a = tid
        while a < N:
            # The clamped action compared without clamping it (a 64-bit min and max): it is PLUS_X,
            # MINUS_X or PLUS_Y exactly where the action is, MINUS_Y (the last) where it is at least that.
            action = actions[e, a]
            # Cells in int32, as the .cu's: Numba adds int32s in 64 bits, and a Python int bound
            # would widen the min and max (and the wall test) to 64 bits too.
            moved_x = np.int32(x[e, a] + np.int32(action == PLUS_X) - np.int32(action == MINUS_X))
            moved_y = np.int32(y[e, a] + np.int32(action == PLUS_Y) - np.int32(action >= MINUS_Y))
            cx = min(max(moved_x, LOW_CELL), HIGH_CELL)
            cy = min(max(moved_y, LOW_CELL), HIGH_CELL)
            x[e, a] = cx
            y[e, a] = cy
            sx[a] = cx
            sy[a] = cy
            rewards[e, a] = wall_hit_penalty if cx != moved_x or cy != moved_y else zero
            a = U(a + threads)
        cuda.syncthreads()

        # Step 2: tagged when any tagger stands on the runner's cell after the moves.
        on_runner = np.int32(0)
        g = tid
        while g < G:
            if sx[g] == sx[RUNNER] and sy[g] == sy[RUNNER]:
                on_runner = np.int32(1)
            g = U(g + threads)
        term = cuda.syncthreads_or(on_runner) != 0

        # Steps 2-3: rewards (tag_term - wall-hit penalty, in float32), episode end.
        trunc = now >= episode_length and not term
        a = tid
        while a < N:
            if a == RUNNER:
                tag_term = -tag_penalty if term else step_cost
            else:
                tag_term = tag_reward if term else -step_cost
            rewards[e, a] = tag_term - rewards[e, a]
            a = U(a + threads)
        if tid == 0:
            t[e] = now
        return term, trunc

    return GameFunctions(reset_env, step_env, observe_env, shared=shared)
