"""TagContinuous Numba kernels, the twin of tag_continuous.cu; the torch reference is
gpu_marl_envs/envs/tag_continuous_reference.py (tag_continuous.py's docstring documents the rules and
float32 conventions).

``game_functions(c)`` builds this game's device functions for one set of params (``kernel_constants``,
typed): they close over them, so the shared arrays are sized by the number of agents and the action
tables are constant arrays. The multi-agent template's kernels (``multi_agent_numba.py``: a block per
env, autoreset, returns) run them.
Agent ``a`` is handled by threads strided over the block (``a = tid``, ``while a < N``, ``a += blockDim``),
so any block size works; every phase boundary of the step is a ``syncthreads`` of the one block,
reached by all its threads. The observation rows are written by teams, chosen when the functions are
built: where the game has a neighbour grid, each warp on its own with warp barriers (``warp_sync``),
as the .cu's; without one (the scan of every agent, or the full observation), the whole block as
one team, chunk after chunk between block barriers. Measured on an H200 (2026-11-30, µs per step),
the warps' rows against the block's: 76.3 against 58.1 at 1,000 games x 110 agents (no grid, the
published training size), 741.4 against 882.9 at 100 x 10,000 (grid), even from 250 to 1,000 agents
(75.2 against 75.1 at 1,000 x 250, 476.8 against 477.2 at 2,000 x 1,000). Indices, loop counters and
grid cells are unsigned or int32 with explicit casts (``U``, ``np.int32``; docs/custom_env.md, "Numba
as fast as CUDA C"): Numba's own int64 arithmetic, a range's run-time step (a 64-bit division for its
trip count) and signed indices' wraparound made this step kernel spill registers at 1,000 agents
(548/1,064 bytes, nvcc's twin 4/4).

Race freedom, as in the .cu: in each phase a thread writes only the agents (or grid places) it
handles; what other threads read (positions, motion, in-game flags, the grid, with TWO_PHASE every
agent's nearest-others list) is staged in shared memory before a block barrier; the grid's counts and
placements, tag counts and the count of runners left are integer atomics, exact in any order. A
team (a warp or the block) writes its own nearest-others lists and staged observation features and
reads them back after its own barrier (``team_sync``). The shared arrays are one dynamic buffer laid
out by ``shared_layout`` in ``tag_continuous_kernel_layout.py``, as the .cu's. Observations are
staged in shared memory a chunk of a team's rows at a time and stored from there: row segment by row
segment in the grid's order, or, by id, as one run of the buffer.

Every intermediate is float32 (the constants are np.float32, and np.float32(...) around math.*
keeps the simulator, where those return Python floats, on the float32 path). The products and sums
that the reference rounds separately (squared distances, the move, the tag reward) go through
``mul_rn``/``add_rn``: libdevice's ``fmul_rn``/``fadd_rn`` on a GPU, which NVVM never fuses into an
FMA (the .cu's ``__fmul_rn``/``__fadd_rn``), and plain float32 operations in the simulator.
"""

import math

import numpy as np
from gpu_marl_envs.kernels.multi_agent_numba import GameFunctions
from gpu_marl_envs.kernels.numba_api import (
    add_rn,
    assume,
    cuda,
    divide,
    float_as_int,
    inline_device,
    int_as_float,
    mul_rn,
    warp_sync,
)
from gpu_marl_envs.kernels.rng_numba import uniform
from numba import boolean, float32, int16, int32, int64, uint16, uint32

FEATURES = 7


def chunk_rows(group: int, most: int, slots: int) -> int:
    """The .cu's chunk_rows: of 1 to `most` rows a chunk, the one that stages a warp's `group` rows
    (`slots` (row, slot) pairs a row) in the fewest passes of its 32 lanes, ties to the most rows."""
    best, fewest = 1, group * ((slots + 31) // 32)
    for rows in range(2, most + 1):
        passes = group // rows * ((rows * slots + 31) // 32) + (group % rows * slots + 31) // 32
        if passes <= fewest:
            best, fewest = rows, passes
    return best


def game_functions(c) -> GameFunctions:
    """This game's device functions for the constants ``c`` (``kernel_constants``, typed)."""
    N = c.NUM_AGENTS
    G = c.NUM_TAGGERS
    BLOCK_THREADS = c.BLOCK_THREADS  # the launch's block size; sizes shared memory
    K = c.NUM_OBSERVED
    OBS_DIM = c.OBS_DIM
    EPISODE_LENGTH = c.EPISODE_LENGTH
    FULL_OBSERVATION = c.FULL_OBSERVATION
    RUNNER_EXITS = c.RUNNER_EXITS
    NUM_ACCELERATION_LEVELS = c.NUM_ACCELERATION_LEVELS
    NUM_TURN_LEVELS = c.NUM_TURN_LEVELS
    ACCELERATION_LEVELS = c.ACCELERATION_LEVELS
    TURN_LEVELS = c.TURN_LEVELS
    if ACCELERATION_LEVELS.shape != (NUM_ACCELERATION_LEVELS + 1,) or TURN_LEVELS.shape != (NUM_TURN_LEVELS + 1,):
        raise ValueError("the level tables must have NUM_*_LEVELS + 1 entries (index 0 = no change)")

    GRID_LENGTH = c.GRID_LENGTH
    TWO_PI = c.TWO_PI
    HALF_PI = c.HALF_PI
    MAX_SPEED_TAGGER = c.MAX_SPEED_TAGGER
    MAX_SPEED_RUNNER = c.MAX_SPEED_RUNNER
    TAGGING_RADIUS = c.TAGGING_RADIUS
    POSITION_SCALE = c.POSITION_SCALE
    SPEED_SCALE = c.SPEED_SCALE
    POSITION_SCALE_RECIPROCAL, POSITION_SCALE_RECIPROCAL_EXACT = (
        c.POSITION_SCALE_RECIPROCAL,
        c.POSITION_SCALE_RECIPROCAL_EXACT,
    )
    SPEED_SCALE_RECIPROCAL, SPEED_SCALE_RECIPROCAL_EXACT = c.SPEED_SCALE_RECIPROCAL, c.SPEED_SCALE_RECIPROCAL_EXACT
    TWO_PI_RECIPROCAL, TWO_PI_RECIPROCAL_EXACT = c.TWO_PI_RECIPROCAL, c.TWO_PI_RECIPROCAL_EXACT
    TAG_REWARD_FOR_TAGGER = c.TAG_REWARD_FOR_TAGGER
    TAG_PENALTY_FOR_RUNNER = c.TAG_PENALTY_FOR_RUNNER
    STEP_PENALTY_FOR_TAGGER = c.STEP_PENALTY_FOR_TAGGER
    STEP_REWARD_FOR_RUNNER = c.STEP_REWARD_FOR_RUNNER
    EDGE_HIT_PENALTY = c.EDGE_HIT_PENALTY
    END_OF_GAME_REWARD_FOR_RUNNER = c.END_OF_GAME_REWARD_FOR_RUNNER
    TIME_SCALE = np.float32(EPISODE_LENGTH)
    ZERO = np.float32(0.0)
    ONE = np.float32(1.0)
    FOUR = np.float32(4.0)
    INFINITY = np.float32(np.inf)
    NAN = np.float32(np.nan)
    U = np.uint32  # an unsigned index (see stage_features)
    # The neighbour grid (see the .cu): C x C cells; buckets 2c (cell c's taggers), 2c + 1 (its
    # runners), then OUT_BUCKET (the agents out of the game).
    C = c.GRID_CELLS
    GRID = C > 1
    GRID_TAGS = c.GRID_TAGS
    OUT_BUCKET = 2 * C * C
    LAST_CELL = np.float32(C - 1)
    INV_CELL_SIZE = c.INV_CELL_SIZE
    CELL_SIZE = c.CELL_SIZE
    CELL_MARGIN = c.CELL_MARGIN
    TAG_REACH = c.TAG_REACH
    # An exact nearest-others entry's key, as in the .cu: its squared distance's bits (a non-negative
    # float orders as its bits) above its id above its place (16 bits each), so that keys order as
    # (distance, id); an empty slot's is all ones below inf's bits.
    EMPTY = np.int64(0x7F800000FFFFFFFF)
    # A packed entry's key, as in the .cu: the distance's bits with the lowest replaced by the place.
    PLACE_MASK = np.uint32((1 << c.PLACE_BITS) - 1)
    TRUNCATE = np.uint32(~int(PLACE_MASK) & 0xFFFFFFFF)
    EMPTY_PACKED = np.uint32(0x7F800000)  # inf's bits: above every finite distance's key
    PACKED_SLOTS = K + 1
    FLT_MAX = np.float32(np.finfo(np.float32).max)
    HALF = np.float32(0.5)
    # The per-agent arrays' places in dynamic shared memory (bytes; shared_layout() in
    # tag_continuous_kernel_layout.py).
    POSITIONS = c.SHARED_POSITIONS // 4  # (x, y) pairs
    IDS, ENDS = c.SHARED_IDS // 2, c.SHARED_ENDS // 4  # ids: uint16
    PLACES, LISTS = c.SHARED_PLACES // 2, c.SHARED_LISTS // 2  # uint16, int16
    TAGS, OBSERVED = c.SHARED_TAGS // 4, c.SHARED_OBSERVED // 4
    IN_GAME = c.SHARED_IN_GAME
    NUM_IDS = N if GRID else 0
    # With TWO_PHASE (as the .cu's): every agent in the game finds its nearest others first, in the
    # grid's order, into its own list (`lists`, by id), and the rows are then written by id (without
    # a grid they are by id anyway); each agent's place in the grid's order is `places`.
    TWO_PHASE = c.TWO_PHASE
    BY_ID = TWO_PHASE or not GRID
    NUM_PLACES = N if TWO_PHASE else 0
    NUM_LISTS = N * K if TWO_PHASE else 0
    NUM_ENDS = OUT_BUCKET + 1 if GRID else 0
    # The observation rows' teams (the module docstring has the measurements): with a grid the
    # block's warps (TEAM_WARP), each on its own as the .cu's, which paid at 10,000 agents; without
    # one the whole block, the faster at 110 agents. A team takes GROUP rows at a time, one lane
    # each for their nearest others (where the .cu splits a scan over SCAN_SPLIT lanes): a warp as
    # many as a warp of the .cu, the block as many as all of them.
    TEAM_WARP = GRID
    TEAMS = BLOCK_THREADS // 32 if TEAM_WARP else 1
    TEAM_THREADS = BLOCK_THREADS // TEAMS
    GROUP = TEAM_THREADS if FULL_OBSERVATION else TEAM_THREADS // c.SCAN_SPLIT
    # The teams' nearest-others lists (`observed`), GROUP agents' each: shared_layout() gives the
    # .cu's BLOCK_THREADS // SCAN_SPLIT lists, which is TEAMS * GROUP for either team.
    NUM_OBSERVED = 0 if FULL_OBSERVATION or TWO_PHASE else TEAMS * GROUP * K
    if NUM_OBSERVED and c.SHARED_OBSERVED + 4 * NUM_OBSERVED > c.SHARED_FEATURES:
        raise ValueError("shared_layout()'s `observed` holds fewer lists than the teams take")
    # The observation features are staged in shared memory (the layout's `features`, WARP_STAGE
    # floats a warp as the .cu's Staging): each team in its own TEAM_STAGE floats (a warp's, or all
    # of them for the block), a chunk of STAGED_ROWS rows x STAGED_SLOTS slots at a time (a row's
    # features, then its time with its last slot: contiguous in the row), and stored from there a
    # row segment after another.
    FEATURES_AT = c.SHARED_FEATURES // 4
    # The agents' speed, acceleration and direction, a triple per place of the staged positions'
    # order, staged in shared memory for the observations where the .cu's are (motion_staged): in a
    # step of one phase (the layout's `motion`) or, with TWO_PHASE (here every step is of two), after
    # the warps' halved staging (`two_phase_motion`); otherwise the observations read the state's.
    # Staged for either team: measured with the warps' rows on an H200 (2026-11-30), it took 2,000
    # games x 1,000 agents from 476.8 to 443.5 µs per step (1,000 x 110: 76.3 to 75.4).
    MOTION_STAGED = c.STAGE_MOTION and (not TWO_PHASE or c.TWO_PHASE_STAGE_MOTION)
    MOTION_AT = (c.SHARED_TWO_PHASE_MOTION if TWO_PHASE and MOTION_STAGED else c.SHARED_MOTION) // 4
    NUM_MOTION = 3 * N if MOTION_STAGED else 0
    WARP_STAGE = c.TWO_PHASE_STAGE_FLOATS if TWO_PHASE and MOTION_STAGED else c.STAGE_FLOATS
    STAGE = BLOCK_THREADS // 32 * WARP_STAGE
    TEAM_STAGE = STAGE // TEAMS
    OBSERVED_SLOTS = N - 1 if FULL_OBSERVATION else K
    STAGED_SLOTS = min(OBSERVED_SLOTS, (TEAM_STAGE - 1) // FEATURES)
    ROW_STRIDE = STAGED_SLOTS * FEATURES + 1
    # A warp stages the chunk that fills its passes of 32 lanes best, as the .cu's; the block as
    # many rows as its room holds (its passes are of the whole block).
    STAGED_ROWS = chunk_rows(GROUP, TEAM_STAGE // ROW_STRIDE, STAGED_SLOTS) if TEAM_WARP else TEAM_STAGE // ROW_STRIDE

    @inline_device
    def known_shapes(state):
        # The state's rows are N long (the .cu's row = e * N, a constant): Numba indexes x[e, a]
        # through x's shape, read at run time, a 64-bit product per array and access (docs/custom_env.md,
        # "Numba as fast as CUDA C", rule 5). The framework allocates exactly these shapes.
        x, y, direction, speed, acceleration, in_game, _ = state
        assume(x.shape[1] == N)
        assume(y.shape[1] == N)
        assume(direction.shape[1] == N)
        assume(speed.shape[1] == N)
        assume(acceleration.shape[1] == N)
        assume(in_game.shape[1] == N)

    @cuda.jit(device=True)
    def squared_distance(dx, dy):
        return add_rn(mul_rn(dx, dx), mul_rn(dy, dy))

    @inline_device
    def position(positions, q):
        """The (x, y) at place q of the staged pairs, read at an unsigned index: a signed one costs
        Numba's wraparound of negative indices, and from an unsigned one NVVM merges the two loads
        into one 64-bit load (as the .cu's float2)."""
        i = np.uint32(q) * np.uint32(2)
        return positions[i], positions[i + np.uint32(1)]

    @inline_device
    def set_position(positions, q, px, py):
        i = np.uint32(q) * np.uint32(2)
        positions[i] = px
        positions[i + np.uint32(1)] = py

    @inline_device
    def stage_motion(motion, place, v, acc, heading):
        """The .cu's stage_motion: an agent's speed, acceleration and direction at `place` of the
        staged arrays, where MOTION_STAGED (a flat run at unsigned indices, as `position`'s)."""
        if MOTION_STAGED:
            i = U(U(place) * U(3))
            motion[i] = v
            motion[i + U(1)] = acc
            motion[i + U(2)] = heading

    @inline_device
    def block_sync():
        cuda.syncthreads()

    # A team's barrier: a warp's, or the block's.
    team_sync = warp_sync if TEAM_WARP else block_sync

    @cuda.jit(device=True)
    def before(d2, i, other_d2, other_i):
        """(d2, i) before (other_d2, other_i): nearer first, ties to the lower id."""
        return d2 < other_d2 or (d2 == other_d2 and i < other_i)

    @cuda.jit(device=True)
    def shared():
        # One dynamic shared buffer (a game of thousands of agents needs more than static shared
        # memory allows), seen as float32, int32 and bool arrays carved at shared_layout's offsets.
        floats = cuda.shared.array(0, float32)
        ints = cuda.shared.array(0, int32)
        flags = cuda.shared.array(0, boolean)
        shorts = cuda.shared.array(0, uint16)
        signed_shorts = cuda.shared.array(0, int16)
        runners_left = cuda.shared.array(1, int32)  # runners in the game after this step's tags
        return (
            # The (x, y) pairs, one flat run (read and written through position / set_position):
            # NVVM keeps loads through a strided view, x = floats[POSITIONS::2], in the generic
            # address space (LD with 64-bit addresses instead of LDS), where the hot loop spent
            # half its instructions.
            floats[POSITIONS : POSITIONS + 2 * N],
            shorts[IDS : IDS + NUM_IDS],
            ints[ENDS : ENDS + NUM_ENDS],
            ints[TAGS : TAGS + G],
            ints[OBSERVED : OBSERVED + NUM_OBSERVED],
            flags[IN_GAME : IN_GAME + N],
            runners_left,
            floats[FEATURES_AT : FEATURES_AT + STAGE],
            shorts[PLACES : PLACES + NUM_PLACES],
            signed_shorts[LISTS : LISTS + NUM_LISTS],
            ints[FEATURES_AT : FEATURES_AT + STAGE],  # the staging buffer's bytes: build_grid's scratch
            floats[MOTION_AT : MOTION_AT + NUM_MOTION],  # (speed, acceleration, direction) triples
        )

    @cuda.jit(device=True)
    def cell_of(v):
        """The grid column (or row) of coordinate v, clamped to the grid: see the .cu."""
        return np.int32(min(max(v * INV_CELL_SIZE, ZERO), LAST_CELL))  # int32: see search_cells

    @cuda.jit(device=True)
    def cell_low(i):
        return np.float32(i) * CELL_SIZE - CELL_MARGIN

    @cuda.jit(device=True)
    def cell_high(i):
        return np.float32(np.int32(i + 1)) * CELL_SIZE + CELL_MARGIN

    @cuda.jit(device=True)
    def gap(i, c, v):
        """A lower bound of |v_j - v| (rounded) over the agents j of column (or row) i, seen from v in c."""
        if i > c:
            g = cell_low(i) - v
        elif i < c:
            g = v - cell_high(i)
        else:
            g = ZERO
        return max(g, ZERO)

    @cuda.jit(device=True)
    def bucket_begin(ends, b):
        b = U(b)  # an unsigned index: see stage_features
        return np.int32(0) if b == U(0) else ends[U(b - U(1))]

    @cuda.jit(device=True)
    def bucket(a, px, py, sh_in_game):
        """Agent a's bucket, unsigned: an index into ends (see build_grid)."""
        if not sh_in_game[a]:
            return U(OUT_BUCKET)
        return U(2 * (cell_of(py) * C + cell_of(px)) + (1 if a >= G else 0))

    @cuda.jit(device=True)
    def build_grid(e, state, sh):
        """The counting sort of the .cu's build_grid (the scan by thread segments here: the
        simulator has no warp shuffles; the staging buffer, free until the observations, serves as
        the segments' scratch). Unsigned indices and while loops, as in step_env; the counts in
        int32, as the arrays hold them (Numba's int32 + int32 is 64-bit)."""
        x, y, direction, speed, acceleration, _, _ = state
        positions, ids, ends, sh_in_game, places, scratch, motion = sh[0], sh[1], sh[2], sh[5], sh[8], sh[10], sh[11]
        tid = U(cuda.threadIdx.x)
        threads = U(cuda.blockDim.x)
        b = tid
        while b < U(OUT_BUCKET + 1):
            ends[b] = 0
            b = U(b + threads)
        cuda.syncthreads()
        a = tid
        while a < U(N):
            cuda.atomic.add(ends, bucket(a, x[e, a], y[e, a], sh_in_game), np.int32(1))
            a = U(a + threads)
        cuda.syncthreads()
        per = U(U(OUT_BUCKET + threads) // threads)  # buckets per thread, rounded up
        first = U(tid * per)
        last = min(U(first + per), U(OUT_BUCKET + 1))
        total = np.int32(0)
        b = first
        while b < last:
            total = np.int32(total + ends[b])
            b = U(b + U(1))
        scratch[tid] = total
        cuda.syncthreads()
        start = np.int32(0)
        u = U(0)
        while u < tid:
            start = np.int32(start + scratch[u])
            u = U(u + U(1))
        b = first
        while b < last:
            count = ends[b]
            ends[b] = start
            start = np.int32(start + count)
            b = U(b + U(1))
        cuda.syncthreads()
        a = tid
        while a < U(N):
            px = x[e, a]
            py = y[e, a]
            # afterwards the bucket's end
            place = U(cuda.atomic.add(ends, bucket(a, px, py, sh_in_game), np.int32(1)))
            set_position(positions, place, px, py)
            ids[place] = uint16(a)
            if TWO_PHASE:
                places[a] = uint16(place)
            stage_motion(motion, place, speed[e, a], acceleration[e, a], direction[e, a])
            a = U(a + threads)
        cuda.syncthreads()

    @cuda.jit(device=True)
    def reset_env(state, sh, e, seed, episode):
        # Draws as in the reference's reset: x_a is draw a, y_a draw N + a, the direction's quarter
        # draw 2N + a.
        x, y, direction, speed, acceleration, in_game, t = state
        positions, sh_in_game = sh[0], sh[5]
        known_shapes(state)
        a = U(cuda.threadIdx.x)  # an unsigned while loop: see step_env
        while a < U(N):
            px = uniform(seed, episode, a, ZERO, GRID_LENGTH)
            py = uniform(seed, episode, N + a, ZERO, GRID_LENGTH)
            quarter = np.float32(math.floor(uniform(seed, episode, 2 * N + a, ZERO, FOUR)))
            x[e, a] = px
            y[e, a] = py
            if not GRID:
                set_position(positions, a, px, py)
                stage_motion(sh[11], a, ZERO, ZERO, quarter * HALF_PI)
            direction[e, a] = quarter * HALF_PI
            speed[e, a] = ZERO
            acceleration[e, a] = ZERO
            in_game[e, a] = True
            sh_in_game[a] = True
            a = U(a + U(cuda.blockDim.x))
        if cuda.threadIdx.x == 0:
            t[e] = 0
        if GRID:
            cuda.syncthreads()
            build_grid(e, state, sh)

    @cuda.jit(device=True)
    def nearest_others(a, positions, sh_in_game, observed, base):
        """Agent a's K nearest others in the game by scanning every other, by (squared distance,
        id), into observed[base:base + K] (-1 for empty slots). The sorted list is meant to live in
        registers, as in the .cu: K is a compile-time constant, so the loops over it unroll and
        every index becomes a constant. Scanning ids in order and moving entries only past strictly
        larger distances keeps ties in id order."""
        best_d2 = cuda.local.array(K, float32)
        best_id = cuda.local.array(K, int32)
        for m in range(K):
            best_d2[m] = INFINITY
            best_id[m] = -1
        xa, ya = position(positions, a)
        # An unsigned while loop, as a is unsigned (docs/custom_env.md, "Numba as fast as CUDA C"):
        # range(N)'s 64-bit j cost a 64-bit counter, compare and in-game index every candidate.
        j = U(0)
        while j < U(N):
            if j != a and sh_in_game[j]:
                xj, yj = position(positions, j)
                d2 = squared_distance(xj - xa, yj - ya)
                if d2 < best_d2[K - 1]:
                    for m in range(K - 1, 0, -1):
                        shift = d2 < best_d2[m - 1]
                        place = not shift and d2 < best_d2[m]
                        best_d2[m] = best_d2[m - 1] if shift else (d2 if place else best_d2[m])
                        best_id[m] = best_id[m - 1] if shift else (np.int32(j) if place else best_id[m])
                    if d2 < best_d2[0]:
                        best_d2[0] = d2
                        best_id[0] = np.int32(j)
            j = U(j + U(1))
        for m in range(K):
            observed[U(base + m)] = best_id[m]

    @inline_device
    def consider(best, limit, q, place, d2, ids):
        """The agent at place q of the grid's order at squared distance d2 into the exact list's
        sorted keys `best` of the agent at `place`, whose last distance (or the largest float while
        it has room) is `limit`; returns the new limit. Each slot is chosen at once, as in the .cu."""
        # NaN (a runner tagged this step) and inf never enter.
        if not (d2 <= limit) or q == place:
            return limit
        key = (np.int64(float_as_int(d2)) << 32) | (np.int64(ids[q]) << 16) | q
        if key >= best[K - 1]:
            return limit
        after = cuda.local.array(K, boolean)  # the new key goes after slot m's
        for m in range(K):
            after[m] = best[m] < key
        for m in range(K - 1, 0, -1):
            best[m] = best[m] if after[m] else (key if after[m - 1] else best[m - 1])
        if not after[0]:
            best[0] = key
        return min(int_as_float(np.int32(best[K - 1] >> 32)), FLT_MAX)

    @inline_device
    def exact_bound(best, limit):
        """The largest squared distance the exact list's last entry may be replaced from: its own."""
        return limit

    @inline_device
    def consider_packed(best, limit, q, place, d2, ids):
        """The .cu's PackedList.consider: into the K + 1 sorted 32-bit keys `best`, a min and a max per
        slot (the limit is unused: the packed list's bound comes from its keys)."""
        # NaN (a runner tagged this step) and inf give keys at or above the empty slot's: never in.
        key = np.uint32((np.uint32(float_as_int(d2)) & TRUNCATE) | np.uint32(q))
        if not (key < best[K]) or q == place:
            return limit
        for m in range(K, 0, -1):
            best[m] = max(best[m - 1], min(best[m], key))
        best[0] = min(best[0], key)
        return limit

    @inline_device
    def packed_bound(best, limit):
        """The largest squared distance the packed list's K-th entry may stand for (inf while it has room)."""
        return INFINITY if best[K - 1] == EMPTY_PACKED else int_as_float(np.int32(best[K - 1] | PLACE_MASK))

    @inline_device
    def may_hold(i, j, cx, cy, xa, ya, limit):
        """Whether cell (i, j) may hold an agent at a squared distance up to `limit` from (xa, ya) in (cx, cy)."""
        gx = gap(i, cx, xa)
        gy = gap(j, cy, ya)
        return not (add_rn(mul_rn(gx, gx), mul_rn(gy, gy)) > limit)

    @inline_device
    def row_run(ends, j, i0, i1):
        """The places of cells i0..i1 of grid row j: one run in the grid's row-major order (empty off the grid)."""
        if j < 0 or j >= C:
            return np.int32(0), np.int32(0)
        return bucket_begin(ends, U(2 * (j * C + i0))), ends[U(2 * (j * C + i1) + 1)]

    def search_cells(consider, bound):
        """The .cu's search_cells for one kind of list (its `consider` and its `bound`, the largest
        distance an entry may still replace): the agent at `place` of the grid's order (at xa, ya)
        against the 3 x 3 block of cells around its own as three runs of places (its own row, the
        nearer, the farther) read as one flat sequence, then rings of cells further out until no
        unscanned cell can hold a nearer agent."""

        @inline_device
        def search(place, xa, ya, sh, best, limit):
            positions, ids, ends = sh[0], sh[1], sh[2]
            cx = cell_of(xa)
            cy = cell_of(ya)
            sy = 1 if ya * INV_CELL_SIZE - np.float32(cy) >= HALF else -1  # towards the nearer row
            i0 = np.int32(max(cx - 1, 0))
            i1 = np.int32(min(cx + 1, C - 1))
            # Sequence position t is place t + shift in its run. (32-bit: Numba's arithmetic is
            # 64-bit, which doubled the loop's index instructions.) A while loop, not a range: Numba's
            # range keeps a count of the trips left beside t, several instructions a candidate; and
            # the places unsigned, as `place` is, so that q == place is one 32-bit compare.
            begin0, end0 = row_run(ends, cy, i0, i1)
            begin1, end1 = row_run(ends, cy + sy, i0, i1)
            begin2, end2 = row_run(ends, cy - sy, i0, i1)
            stop0 = np.int32(end0 - begin0)
            stop1 = np.int32(stop0 + end1 - begin1)
            total = np.int32(stop1 + end2 - begin2)
            shift0, shift1, shift2 = np.int32(begin0), np.int32(begin1 - stop0), np.int32(begin2 - stop1)
            t = np.int32(0)
            while t < total:
                q = U(t + (shift0 if t < stop0 else (shift1 if t < stop1 else shift2)))
                xq, yq = position(positions, q)
                limit = consider(best, limit, q, place, squared_distance(xq - xa, yq - ya), ids)
                t = np.int32(t + 1)
            # The rings' cell coordinates in int32 and while loops (a range of a run-time step is
            # 64-bit, with a 64-bit division for its length); Numba's int32 + int is 64-bit, hence
            # the np.int32 around each sum.
            reach = np.int32(max(max(cx, C - 1 - cx), max(cy, C - 1 - cy)))
            r = np.int32(2)
            while r <= reach:
                side = INFINITY
                if cx + r < C:
                    side = min(side, cell_low(cx + r) - xa)
                if cx - r >= 0:
                    side = min(side, xa - cell_high(cx - r))
                if cy + r < C:
                    side = min(side, cell_low(cy + r) - ya)
                if cy - r >= 0:
                    side = min(side, ya - cell_high(cy - r))
                side = max(side, ZERO)
                if mul_rn(side, side) > bound(best, limit):
                    break
                j = np.int32(max(cy - r, 0))
                j1 = np.int32(min(cy + r, C - 1))
                while j <= j1:
                    # Rows cy - r and cy + r of the ring are whole; the rows between hold its two side cells.
                    whole = j == np.int32(cy - r) or j == np.int32(cy + r)
                    i = np.int32(max(cx - r, 0)) if whole else np.int32(cx - r)
                    i1 = np.int32(min(cx + r, C - 1)) if whole else np.int32(cx + r)
                    step = np.int32(1) if whole else np.int32(2 * r)
                    while i <= i1:
                        if i >= 0 and i < C and may_hold(i, j, cx, cy, xa, ya, bound(best, limit)):
                            b = U(U(j * C + i) * U(2))  # the cell's taggers; its runners follow
                            q, q1 = U(bucket_begin(ends, b)), U(ends[U(b + U(1))])
                            while q < q1:
                                xq, yq = position(positions, q)
                                limit = consider(best, limit, q, place, squared_distance(xq - xa, yq - ya), ids)
                                q = U(q + U(1))
                        i = np.int32(i + step)
                    j = np.int32(j + 1)
                r = np.int32(r + 1)
            return limit

        return search

    search_exact = search_cells(consider, exact_bound)
    search_packed = search_cells(consider_packed, packed_bound)

    @inline_device
    def truncated(key):
        return key & TRUNCATE

    @cuda.jit(device=True)
    def nearest_others_in_grid(place, xa, ya, sh, out, base):
        """The .cu's nearest_others for the agent at `place` of the grid's order (at xa, ya): the packed
        list's search; where its entries are the right agents but two have equal truncated distances,
        their exact order from the exact list's insertion of those K alone; where it cannot vouch for
        its agents, the exact list's search. The places into out[base:base + K] (-1 for empty
        slots)."""
        positions, ids = sh[0], sh[1]
        packed = cuda.local.array(PACKED_SLOTS, uint32)
        for m in range(PACKED_SLOTS):
            packed[m] = EMPTY_PACKED
        search_packed(place, xa, ya, sh, packed, FLT_MAX)
        right_agents = packed[K] == EMPTY_PACKED or truncated(packed[K - 1]) < truncated(packed[K])
        distinct = True
        for m in range(K - 1):
            if packed[m + 1] != EMPTY_PACKED and truncated(packed[m]) == truncated(packed[m + 1]):
                distinct = False
        if right_agents and distinct:
            for m in range(K):
                out[U(base + m)] = -1 if packed[m] == EMPTY_PACKED else np.int32(packed[m] & PLACE_MASK)
            return
        best = cuda.local.array(K, int64)  # the exact list's sorted keys
        for m in range(K):
            best[m] = EMPTY
        limit = FLT_MAX
        if right_agents:
            for m in range(K):
                if packed[m] != EMPTY_PACKED:
                    q = U(packed[m] & PLACE_MASK)
                    xq, yq = position(positions, q)
                    limit = consider(best, limit, q, place, squared_distance(xq - xa, yq - ya), ids)
        else:
            search_exact(place, xa, ya, sh, best, limit)
        for m in range(K):
            out[U(base + m)] = (best[m] & 0xFFFF) if best[m] != EMPTY else -1

    @cuda.jit(device=True)
    def id_at(ids, place):
        """The id of the agent at `place` of the staged arrays: the grid's order with a grid."""
        return np.int32(ids[place]) if GRID else place

    @cuda.jit(device=True)
    def row_agent(ids, row):
        """The agent of observation row `row` in the rows' order: by id (BY_ID), else the grid's."""
        return row if BY_ID else id_at(ids, row)

    @cuda.jit(device=True)
    def row_place(places, row):
        """The place in the staged arrays of the agent of row `row`."""
        return np.int32(places[row]) if TWO_PHASE else row

    @inline_device
    def first_pair(index, stride, width):
        """(row, column) of the row-major `index` over rows of `width`, and the (rows, columns) that a
        `stride` of indices moves it by: where a thread's strided loop starts, for step_pair."""
        # Unsigned 32-bit (U: every value here is non-negative): Numba's signed 64-bit division is
        # a call into a division routine.
        index, stride, width = U(index), U(stride), U(width)
        r = U(index // width)
        rows_step = U(stride // width)
        return r, U(index - U(r * width)), rows_step, U(stride - U(rows_step * width))

    @inline_device
    def step_pair(r, c, rows_step, columns_step, width):
        """(row, column) of a row-major index over rows of `width`, moved on by rows_step * width +
        columns_step (columns_step < width). A thread's strided loop over a chunk's (row, column)
        pairs steps this way rather than dividing each index: Numba's integers are 64-bit, and a
        64-bit division is dozens of instructions per element."""
        c = U(c + columns_step)
        if c >= width:
            return U(r + U(rows_step + U(1))), U(c - width)
        return U(r + rows_step), c

    # An observation's difference over one of its scales (the .cu's SCALED), by numba_api.divide.
    @inline_device
    def over_position_scale(x):
        return divide(x, POSITION_SCALE, POSITION_SCALE_RECIPROCAL, POSITION_SCALE_RECIPROCAL_EXACT)

    @inline_device
    def over_speed_scale(x):
        return divide(x, SPEED_SCALE, SPEED_SCALE_RECIPROCAL, SPEED_SCALE_RECIPROCAL_EXACT)

    @inline_device
    def over_two_pi(x):
        return divide(x, TWO_PI, TWO_PI_RECIPROCAL, TWO_PI_RECIPROCAL_EXACT)

    @cuda.jit(device=True)
    def stage_features(e, first, rows, observed, lists, m0, slots, time, state, sh, lane, width, at):
        """Features m0.. (`slots` of them) of rows first.. (`rows` of them, in row_agent's order;
        their nearest-others lists in `observed` from index `lists` on) into the team's staging
        buffer (from index `at` on), a (row, slot) pair per lane (of the team's `width`) and pass:
        every lane does the same work, whatever kinds of feature its values are; a pair of an agent
        out of the game, or an empty slot, is only zeros. The motion comes from shared memory where
        MOTION_STAGED, else from the state's rows. (Staged through strided views, floats[MOTION::3],
        it made these kernels slower on an H100, 38.0 against 37.2 µs per step at 100 games x 110
        agents, 159 against 136 at 1000: NVVM keeps loads through such views generic, see shared();
        a flat run's are shared loads.)"""
        _, _, direction, speed, acceleration, _, _ = state
        positions, ids, sh_in_game, staged, places, motion = sh[0], sh[1], sh[5], sh[7], sh[8], sh[11]
        # Env e's state rows as 1D views. They and the staging buffer are indexed unsigned (U):
        # at a signed index Numba wraps negative ones, several instructions an access.
        speeds, accelerations, directions = speed[e], acceleration[e], direction[e]
        last = m0 + slots == OBSERVED_SLOTS  # the rows' times come with their last slots
        r, n, rows_step, slots_step = first_pair(lane, width, slots)
        pair, pairs = lane, U(rows * slots)
        while pair < pairs:  # (a range with a step kept 64-bit signed counting in every pass)
            m = m0 + n
            a = row_agent(ids, first + r)
            own = row_place(places, first + r)
            playing = sh_in_game[a]
            if FULL_OBSERVATION:
                q = m if m < a else m + 1  # every other agent in id order (their places: no grid here)
            else:
                q = observed[U(lists + r * K + m)]
            base = U(at + r * ROW_STRIDE + n * FEATURES)
            if playing and q >= 0:
                j = id_at(ids, U(q))
                uj, ua = U(j), U(a)
                xq, yq = position(positions, q)
                x_own, y_own = position(positions, own)
                staged[base] = over_position_scale(xq - x_own)
                staged[base + U(1)] = over_position_scale(yq - y_own)
                if MOTION_STAGED:  # the .cu's Motions<true>: the triples at places q and own
                    k, i = U(U(q) * U(3)), U(U(own) * U(3))
                    dv = motion[k] - motion[i]
                    da = motion[k + U(1)] - motion[i + U(1)]
                    dh = motion[k + U(2)] - motion[i + U(2)]
                else:
                    dv = speeds[uj] - speeds[ua]
                    da = accelerations[uj] - accelerations[ua]
                    dh = directions[uj] - directions[ua]
                staged[base + U(2)] = over_speed_scale(dv)
                staged[base + U(3)] = over_speed_scale(da)
                staged[base + U(4)] = over_two_pi(dh)
                staged[base + U(5)] = ONE if j < G else ZERO
                staged[base + U(6)] = ONE if sh_in_game[uj] else ZERO
            else:  # an agent out of the game or an empty slot: zeros
                for c in range(FEATURES):
                    staged[base + U(c)] = ZERO
            if last and n == 0:
                staged[U(at + r * ROW_STRIDE + slots * FEATURES)] = time if playing else ZERO
            r, n = step_pair(r, n, rows_step, slots_step, slots)
            pair = U(pair + width)  # (pair += width is 64-bit: Numba widens uint32 + uint32)

    @cuda.jit(device=True)
    def observe_env(state, sh, e, out, masks):
        """Observations of env e's agents into out[e] (the state rows, the staged positions and the
        grid if any must be current and visible to the whole block), by teams of `width` lanes (the
        warps where TEAM_WARP, as the .cu's write_rows, else the whole block): each team takes
        groups of up to GROUP consecutive rows with its own barriers only (team_sync): its lanes
        find the group's nearest others into the team's lists (with TWO_PHASE every agent in the
        game has found them before, in the grid's order, then a block barrier), then it stages the
        rows' features in chunks in its part of the staging buffer and stores each chunk,
        consecutive lanes writing consecutive floats (by id, a chunk's rows are one run of out).
        (The .cu also splits one agent's scan over several lanes, with shuffles, which the simulator
        has not.) No action masks in this game."""
        positions, ids, ends, sh_in_game, staged = sh[0], sh[1], sh[2], sh[5], sh[7]
        known_shapes(state)
        assume(out.shape[1] == N * OBS_DIM)
        observations = out[e]  # env e's row of the buffer, a 1D view
        time = np.float32(state[6][e]) / TIME_SCALE
        # Unsigned indices (U) and while loops, as in step_env and stage_features.
        tid = U(cuda.threadIdx.x)
        threads = U(cuda.blockDim.x)
        if TWO_PHASE:  # every agent's list (sh[9], by id); otherwise each team's lists (sh[4])
            place, end = tid, U(ends[OUT_BUCKET - 1])  # the agents out of the game come after
            while place < end:
                a = id_at(ids, place)
                if sh_in_game[a]:  # (a runner tagged this step is still in its cell)
                    xa, ya = position(positions, place)
                    nearest_others_in_grid(place, xa, ya, sh, sh[9], U(a * K))
                place = U(place + threads)
            cuda.syncthreads()
        if TEAM_WARP:
            # Warps of 32 lanes; in a block of fewer threads (the simulator's: half as many as
            # agents), one warp of them all. Threads past the last whole warp (the simulator's) take
            # no rows.
            width = U(32) if threads >= U(32) else threads
            lane = U(tid % U(32)) if threads >= U(32) else tid
            team = U(tid // U(32)) if threads >= U(32) else U(0)
            teams = U(threads // width)
            group = U(GROUP)
        else:  # the block: GROUP rows at a time, or a row a thread where it has fewer (the simulator's)
            width, lane, team, teams = threads, tid, U(0), U(1)
            group = min(threads, U(GROUP))
        at = U(team * U(TEAM_STAGE))  # the team's staging buffer
        lists = U(team * U(GROUP * K))  # the team's lists in sh[4]
        # Every warp takes as many groups (its last ones empty where the rows run out) and as many
        # chunks of each, so that the warps reach their barriers equally often (the simulator's are
        # the block's); the block, one team, takes only its rows' chunks.
        groups = U(teams * group)  # rows the teams take in one pass
        base = U(0)
        while base < U(N):
            first = U(base + team * group)
            # A warp's group may start past the last row (and the simulator's spare threads take
            # none); the block's starts at base, within them.
            rows = min(group, U(N - first)) if not TEAM_WARP or (team < teams and first < U(N)) else U(0)
            if not FULL_OBSERVATION and not TWO_PHASE:  # the group's nearest others, into the team's lists
                r = lane
                while r < rows:
                    a = id_at(ids, U(first + r))
                    if sh_in_game[a]:
                        if GRID:
                            place = U(first + r)
                            xa, ya = position(positions, place)
                            nearest_others_in_grid(place, xa, ya, sh, sh[4], U(lists + r * K))
                        else:
                            nearest_others(a, positions, sh_in_game, sh[4], U(lists + r * K))
                    # A lane a row: one pass, but in the simulator's warps of fewer lanes than GROUP
                    # (the block's group is never more rows than it has threads).
                    r = U(r + width) if TEAM_WARP else rows
                team_sync()
            r0 = U(0)
            chunks_end = U(GROUP) if TEAM_WARP else rows
            while r0 < chunks_end:
                staged_rows = min(U(STAGED_ROWS), U(rows - r0)) if not TEAM_WARP or r0 < rows else U(0)
                for m0 in range(0, OBSERVED_SLOTS, STAGED_SLOTS):
                    slots = min(STAGED_SLOTS, OBSERVED_SLOTS - m0)
                    # The rows' lists: every agent's by id (TWO_PHASE), or the team's own.
                    observed = sh[9] if TWO_PHASE else sh[4]
                    listed = U(U(first + r0) * K) if TWO_PHASE else U(lists + r0 * K)
                    stage_features(
                        e, U(first + r0), staged_rows, observed, listed, m0, slots, time, state, sh, lane, width, at
                    )
                    team_sync()
                    if BY_ID and ROW_STRIDE == OBS_DIM:  # whole rows by id: the chunk is one run of out
                        # The run as a view of its own: indexed at run + i, each store paid the 32-bit
                        # sum and e's row afresh (13 instructions a float, 11 now; nvcc's, unrolled, 4).
                        run = observations[U(U(first + r0) * U(OBS_DIM)) :]
                        i, floats = lane, U(staged_rows * U(OBS_DIM))
                        while i < floats:
                            run[i] = staged[U(at + i)]
                            i = U(i + width)
                    else:  # a row segment after another
                        length = slots * FEATURES + (1 if m0 + slots == OBSERVED_SLOTS else 0)
                        r, w, rows_step, floats_step = first_pair(lane, width, length)
                        i, floats = lane, U(staged_rows * length)
                        while i < floats:
                            row = row_agent(ids, U(first + r0 + r)) * OBS_DIM + m0 * FEATURES
                            observations[U(row + w)] = staged[U(at + r * ROW_STRIDE + w)]
                            r, w = step_pair(r, w, rows_step, floats_step, length)
                            i = U(i + width)
                    team_sync()  # the next chunk overwrites the staged features (the next group, the lists)
                r0 = U(r0 + U(STAGED_ROWS))
            base = U(base + groups)

    @cuda.jit(device=True)
    def nearest_tagger(e, x, y, xa, ya, sh):
        """Runner (xa, ya)'s nearest tagger in the game (ties: lowest id) and its squared distance
        (inf if none), as far as a tag is concerned: see the .cu."""
        positions, ids, ends, sh_in_game = sh[0], sh[1], sh[2], sh[5]
        best = INFINITY
        nearest = U(0)
        if GRID_TAGS:
            # Unsigned cells, places and ids (while loops): see stage_features.
            j, j1 = U(cell_of(ya - TAG_REACH)), U(cell_of(ya + TAG_REACH))
            i0, i1 = U(cell_of(xa - TAG_REACH)), U(cell_of(xa + TAG_REACH))
            while j <= j1:
                i = i0
                while i <= i1:
                    b = U(U(j * U(C) + i) * U(2))
                    q, q1 = U(bucket_begin(ends, b)), U(ends[b])
                    while q < q1:
                        xq, yq = position(positions, q)
                        d2 = squared_distance(xa - xq, ya - yq)
                        if before(d2, U(ids[q]), best, nearest):
                            best = d2
                            nearest = U(ids[q])
                        q = U(q + U(1))
                    i = U(i + U(1))
                j = U(j + U(1))
        else:
            for j in range(G):
                if not sh_in_game[j]:
                    continue
                if GRID:
                    d2 = squared_distance(xa - x[e, j], ya - y[e, j])
                else:
                    xj, yj = position(positions, j)
                    d2 = squared_distance(xa - xj, ya - yj)
                if d2 < best:
                    best = d2
                    nearest = U(j)
        return best, nearest

    @cuda.jit(device=True)
    def step_env(state, sh, e, actions, rewards):
        # Spec step 1-3: move the agents in the game, their step rewards and edge penalties.
        x, y, direction, speed, acceleration, in_game, t = state
        positions, ids, ends, tags, sh_in_game, runners_left = sh[0], sh[1], sh[2], sh[3], sh[5], sh[6]
        known_shapes(state)
        assume(actions.shape[1] == N)
        assume(actions.shape[2] == 2)
        assume(rewards.shape[1] == N)
        # Strided loops over the block's threads as unsigned while loops (docs/custom_env.md, "Numba
        # as fast as CUDA C"): a range with a run-time step is 64-bit, with a 64-bit division for its
        # length and Python's negative-index wraparound on every access.
        tid = U(cuda.threadIdx.x)
        threads = U(cuda.blockDim.x)
        now = t[e] + 1
        g = tid
        while g < U(G):
            tags[g] = 0
            g = U(g + threads)
        if tid == 0:
            runners_left[0] = 0
        a = tid
        while a < U(N):
            # Every agent's move is computed, in play or not, and kept where it is in play: its
            # state and action are read together, in one round trip to global memory (as in the
            # CUDA C kernel).
            playing = in_game[e, a]
            px = x[e, a]
            py = y[e, a]
            heading = direction[e, a]
            acc = acceleration[e, a]
            v = speed[e, a]
            acc_index = min(max(actions[e, a, 0], 0), NUM_ACCELERATION_LEVELS)
            turn_index = min(max(actions[e, a, 1], 0), NUM_TURN_LEVELS)
            moved_heading = np.float32(math.fmod(heading + TURN_LEVELS[turn_index], TWO_PI))
            if moved_heading < ZERO:
                moved_heading = moved_heading + TWO_PI
            if moved_heading == TWO_PI:
                moved_heading = ZERO
            moved_acc = acc + ACCELERATION_LEVELS[acc_index]
            top = MAX_SPEED_TAGGER if a < G else MAX_SPEED_RUNNER
            moved_v = min(max(v + moved_acc, ZERO), top)
            if moved_v == ZERO or moved_v == top:
                moved_acc = ZERO
            moved_x = add_rn(px, mul_rn(moved_v, np.float32(math.cos(moved_heading))))
            moved_y = add_rn(py, mul_rn(moved_v, np.float32(math.sin(moved_heading))))
            edge = moved_x < ZERO or moved_x > GRID_LENGTH or moved_y < ZERO or moved_y > GRID_LENGTH
            reward = STEP_PENALTY_FOR_TAGGER if a < G else STEP_REWARD_FOR_RUNNER
            if edge:
                reward = reward + EDGE_HIT_PENALTY
            if not playing:
                reward = ZERO
            else:
                heading = moved_heading
                acc = moved_acc
                v = moved_v
                px = min(max(moved_x, ZERO), GRID_LENGTH)
                py = min(max(moved_y, ZERO), GRID_LENGTH)
                direction[e, a] = heading
                acceleration[e, a] = acc
                speed[e, a] = v
                x[e, a] = px
                y[e, a] = py
            if not GRID:
                set_position(positions, a, px, py)
                stage_motion(sh[11], a, v, acc, heading)
            sh_in_game[a] = playing
            rewards[e, a] = reward
            a = U(a + threads)
        cuda.syncthreads()
        if GRID:
            build_grid(e, state, sh)

        # Step 4: each runner in the game against its nearest tagger in the game (ties: lowest id).
        # With a grid the runners are visited in its order (their place is where a tagged one is
        # struck out of the nearest-others search).
        left = 0
        if GRID:
            q, end = tid, U(ends[OUT_BUCKET - 1])  # the places of the agents in the game
        else:
            q, end = U(G + tid), U(N)
        while q < end:
            a = U(ids[q]) if GRID else q
            if a >= U(G) and sh_in_game[a]:
                xq, yq = position(positions, q)
                best, nearest = nearest_tagger(e, x, y, xq, yq, sh)
                if np.float32(math.sqrt(best)) < TAGGING_RADIUS:
                    cuda.atomic.add(tags, nearest, np.int32(1))
                    rewards[e, a] = rewards[e, a] + TAG_PENALTY_FOR_RUNNER
                    if RUNNER_EXITS:
                        # Only runners' flags change here, and this phase reads only taggers' flags and places.
                        sh_in_game[a] = False
                        in_game[e, a] = False
                        speed[e, a] = ZERO
                        acceleration[e, a] = ZERO
                        if MOTION_STAGED:  # its staged speed and acceleration too (read after the barrier)
                            sh[11][U(q * U(3))] = sh[11][U(q * U(3) + U(1))] = ZERO
                        if GRID:  # out of the nearest-others search: no distance to it is kept
                            set_position(positions, q, NAN, yq)
                if sh_in_game[a]:
                    left += 1
            q = U(q + threads)
        if left > 0:
            cuda.atomic.add(runners_left, 0, np.int32(left))
        cuda.syncthreads()

        # Steps 3-6: taggers' tag rewards, end-of-game rewards, episode end.
        term = runners_left[0] == 0
        last = now == EPISODE_LENGTH
        trunc = last and not term
        a = tid
        while a < U(N):
            reward = rewards[e, a]
            if a < U(G):
                count = tags[a]
                if count > 0:
                    reward = add_rn(reward, mul_rn(np.float32(count), TAG_REWARD_FOR_TAGGER))
            elif last and sh_in_game[a]:
                reward = reward + END_OF_GAME_REWARD_FOR_RUNNER
            rewards[e, a] = reward
            a = U(a + threads)
        if tid == 0:
            t[e] = now
        return term, trunc

    @cuda.jit(device=True)
    def agent_in_game(state, sh, e, a):
        return sh[5][a]  # sh_in_game, current after a step

    # The .cu's bound (min_blocks_per_sm in tag_continuous_kernel_layout.py): unbounded, NVVM gave the step
    # kernel 149 registers at 2,000 x 1,000 (ptxas for sm_90), one 256-thread block per SM.
    return GameFunctions(
        reset_env,
        step_env,
        observe_env,
        shared=shared,
        in_game=agent_in_game,
        launch_bounds=(BLOCK_THREADS, c.MIN_BLOCKS),
    )
