// TagContinuous (gpu_marl_envs/envs/tag_continuous.py is the reference and documents the rules and
// float32 conventions) on the multi-agent template (multi_agent.cuh: a block per env, agents spread
// over its threads, autoreset, returns): this file is the game's part, struct TagContinuous. The
// params arrive as #define TC_* constants (kernel_constants in the reference module, TC_BLOCK_THREADS
// the launch's block size), the RNG and autoreset constants as GME_* (multi_agent_pycuda.kernel_source).
//
// Race freedom: in each phase a thread writes only the agents it handles in that phase (runners are
// spread over the threads on their own in the tag phase); what other threads read
// (positions, in-game flags) is staged in shared memory before a barrier; tag counts and the count
// of runners left are integer atomics, exact in any order.
// No fused multiply-adds where the reference rounds twice: __fmul_rn / __fadd_rn.
#include "multi_agent.cuh"

#define N TC_NUM_AGENTS
#define G TC_NUM_TAGGERS
#define K TC_NUM_OBSERVED
#define FEATURES 7
#define C TC_GRID_CELLS  // cells per side of the neighbour grid; 1: no grid (every agent scans every other)
#define GRID (C > 1)
#define OUT_BUCKET (2 * C * C)  // the grid's buckets: cell c's taggers (2c), its runners (2c + 1), then the agents out of the game

__constant__ float tc_acceleration_levels[TC_NUM_ACCELERATION_LEVELS + 1] = TC_ACCELERATION_LEVELS;
__constant__ float tc_turn_levels[TC_NUM_TURN_LEVELS + 1] = TC_TURN_LEVELS;

// The per-agent arrays live in dynamic shared memory (a game of thousands of agents needs more than
// the 48 KiB of static shared memory a block may declare), at the byte offsets TC_SHARED_* of
// shared_layout() in the reference module, which documents each array.
extern __shared__ __align__(16) unsigned char tc_dynamic[];

struct TagShared {
    int runners_left;  // runners in the game after this step's tags

    __device__ float* x() const { return (float*)(tc_dynamic + TC_SHARED_X); }
    __device__ float* y() const { return (float*)(tc_dynamic + TC_SHARED_Y); }
    __device__ int* ids() const { return (int*)(tc_dynamic + TC_SHARED_IDS); }
    __device__ int* ends() const { return (int*)(tc_dynamic + TC_SHARED_ENDS); }
    __device__ int* tags() const { return (int*)(tc_dynamic + TC_SHARED_TAGS); }
    __device__ int* observed() const { return (int*)(tc_dynamic + TC_SHARED_OBSERVED); }
    __device__ bool* in_game() const { return (bool*)(tc_dynamic + TC_SHARED_IN_GAME); }
};

struct EnvState {  // one env's rows of the state arrays
    float* x;
    float* y;
    float* direction;
    float* speed;
    float* acceleration;
    bool* in_game;
};

// The game, as multi_agent.cuh calls it.
struct TagContinuous {
    struct State {
        float* x;
        float* y;
        float* direction;
        float* speed;
        float* acceleration;
        bool* in_game;
        int* t;
    };
    typedef TagShared Shared;
    static constexpr int num_agents = N, obs_size = N * TC_OBS_DIM, mask_size = 0, action_size = 2, num_metrics = 0;

    __device__ static void reset_env(const State& state, Shared& sh, int e, unsigned long long seed,
                                     unsigned int episode);
    __device__ static void step_env(const State& state, Shared& sh, int e, const GmeActionRow& actions, float* rewards,
                                    bool& term, bool& trunc);
    __device__ static bool in_game(const State&, const Shared& sh, int, int a) { return sh.in_game()[a]; }
    __device__ static void observe_env(const State& state, Shared& sh, int e, float* obs, bool*);
};

__device__ __forceinline__ EnvState env_rows(const TagContinuous::State& s, int e) {
    long long o = (long long)e * N;
    return EnvState{s.x + o, s.y + o, s.direction + o, s.speed + o, s.acceleration + o, s.in_game + o};
}

__device__ __forceinline__ float squared_distance(float dx, float dy) {
    return __fadd_rn(__fmul_rn(dx, dx), __fmul_rn(dy, dy));
}

// (d2, id) before (other_d2, other_id): nearer first, ties to the lower id; ids compare unsigned, so
// an empty slot's -1 comes last.
__device__ __forceinline__ bool before(float d2, unsigned id, float other_d2, unsigned other_id) {
    return d2 < other_d2 || (d2 == other_d2 && id < other_id);
}

#if GRID
// The grid: C x C cells of side L / C over the arena. An agent's cell is int(x * (C / L)) clamped to
// the grid (so agents off the arena sit in its border cells): monotone in x, and within a few ulps
// of L of the exact boundaries, which cell_low / cell_high widen by far more (TC_CELL_MARGIN). Every
// agent of column i has cell_low(i) <= x, and of a column i < C - 1 also x <= cell_high(i).
__device__ __forceinline__ int cell_of(float v) {
    return (int)fminf(fmaxf(v * TC_INV_CELL_SIZE, 0.0f), (float)(C - 1));
}
__device__ __forceinline__ float cell_low(int i) { return (float)i * TC_CELL_SIZE - TC_CELL_MARGIN; }
__device__ __forceinline__ float cell_high(int i) { return (float)(i + 1) * TC_CELL_SIZE + TC_CELL_MARGIN; }

// A lower bound of |fl(v_j - v)| over the agents j of column (or row) i, seen from v in column c:
// rounding is monotone, so fl(v_j - v) >= fl(cell_low(i) - v) when v_j >= cell_low(i).
__device__ __forceinline__ float gap(int i, int c, float v) {
    float g = i > c ? cell_low(i) - v : (i < c ? v - cell_high(i) : 0.0f);
    return fmaxf(g, 0.0f);
}

__device__ __forceinline__ int bucket_begin(const TagShared& sh, int b) { return b == 0 ? 0 : sh.ends()[b - 1]; }

// Sort the game's agents by bucket (a counting sort: counts, a scan, then each agent placed by an
// atomic cursor, so the order within a bucket is arbitrary and nothing downstream depends on it)
// into x, y, ids; ends[b] is where bucket b ends. Needs the state rows' positions and the staged
// in-game flags visible to the block; ends with the block synchronised.
__device__ void build_grid(const EnvState& s, TagShared& sh) {
    int* ends = sh.ends();
    bool* in_game = sh.in_game();
    for (int b = threadIdx.x; b <= OUT_BUCKET; b += blockDim.x) ends[b] = 0;
    __syncthreads();
    for (int a = threadIdx.x; a < N; a += blockDim.x) {
        int b = in_game[a] ? 2 * (cell_of(s.y[a]) * C + cell_of(s.x[a])) + (a >= G) : OUT_BUCKET;
        atomicAdd(&ends[b], 1);
    }
    __syncthreads();
    if (threadIdx.x < 32) {  // one warp turns the counts into bucket starts (an exclusive scan)
        constexpr int per_lane = (OUT_BUCKET + 1 + 31) / 32;
        int lane = threadIdx.x, first = lane * per_lane, sum = 0;
        for (int b = first; b < min(first + per_lane, OUT_BUCKET + 1); ++b) sum += ends[b];
        int inclusive = sum;
#pragma unroll
        for (int offset = 1; offset < 32; offset <<= 1) {
            int other = __shfl_up_sync(0xffffffffu, inclusive, offset);
            if (lane >= offset) inclusive += other;
        }
        int start = inclusive - sum;
        for (int b = first; b < min(first + per_lane, OUT_BUCKET + 1); ++b) {
            int count = ends[b];
            ends[b] = start;
            start += count;
        }
    }
    __syncthreads();
    float* x = sh.x();
    float* y = sh.y();
    int* ids = sh.ids();
    for (int a = threadIdx.x; a < N; a += blockDim.x) {
        float px = s.x[a], py = s.y[a];
        int b = in_game[a] ? 2 * (cell_of(py) * C + cell_of(px)) + (a >= G) : OUT_BUCKET;
        int place = atomicAdd(&ends[b], 1);  // the bucket's start, advanced: afterwards its end
        x[place] = px;
        y[place] = py;
        ids[place] = a;
    }
    __syncthreads();
}
#endif

__device__ void TagContinuous::reset_env(const State& state, Shared& sh, int e, unsigned long long seed,
                                         unsigned int episode) {
    EnvState s = env_rows(state, e);
    for (int a = threadIdx.x; a < N; a += blockDim.x) {
        float x = gme_uniform(seed, episode, a, 0.0f, TC_GRID_LENGTH);
        float y = gme_uniform(seed, episode, N + a, 0.0f, TC_GRID_LENGTH);
        float quarter = floorf(gme_uniform(seed, episode, 2 * N + a, 0.0f, 4.0f));
        s.x[a] = x;
        s.y[a] = y;
#if !GRID
        sh.x()[a] = x;
        sh.y()[a] = y;
#endif
        s.direction[a] = quarter * TC_HALF_PI;
        s.speed[a] = 0.0f;
        s.acceleration[a] = 0.0f;
        s.in_game[a] = sh.in_game()[a] = true;
    }
    if (threadIdx.x == 0) state.t[e] = 0;
#if GRID
    __syncthreads();
    build_grid(s, sh);
#endif
}

// The k nearest others are kept in a sorted list in registers (K is a compile-time constant, so after
// unrolling every index is one): insert (d2, id), known to come before the list's last entry.
__device__ __forceinline__ void insert(float (&best_d2)[K], unsigned (&best_id)[K], float d2, unsigned id) {
#pragma unroll
    for (int m = K - 1; m > 0; --m) {
        bool shift = before(d2, id, best_d2[m - 1], best_id[m - 1]);
        bool place = !shift && before(d2, id, best_d2[m], best_id[m]);
        best_d2[m] = shift ? best_d2[m - 1] : (place ? d2 : best_d2[m]);
        best_id[m] = shift ? best_id[m - 1] : (place ? id : best_id[m]);
    }
    if (before(d2, id, best_d2[0], best_id[0])) {
        best_d2[0] = d2;
        best_id[0] = id;
    }
}

#if !TC_FULL_OBSERVATION
#define SPLIT TC_SCAN_SPLIT  // lanes that share one observer's scan (a power of 2, at most 32; 1 with a grid)

#if GRID
// Agent a (at place `place` of the grid's order, at xa, ya)'s K nearest others in the game, by
// (squared distance, id), into ids (-1 for empty slots). The agent scans rings of cells around its
// own, nearest ring first: before ring r, every agent not yet scanned lies in a column or row at
// least r cells away, hence at a squared distance no less than the square of the nearest such
// side's gap; once that bound exceeds the list's last distance, nothing unscanned can enter it.
// Within a ring, a cell whose own bound exceeds it is skipped. Ties to the lower id wherever they
// are found, so the order of the scan does not matter.
__device__ void nearest_others(const TagShared& sh, int a, int place, float xa, float ya, int* out) {
    float best_d2[K];
    unsigned best_id[K];
#pragma unroll
    for (int m = 0; m < K; ++m) {
        best_d2[m] = INFINITY;
        best_id[m] = 0xffffffffu;
    }
    const float* x = sh.x();
    const float* y = sh.y();
    const int* ids = sh.ids();
    const int* ends = sh.ends();
    int cx = cell_of(xa), cy = cell_of(ya);
    int reach = max(max(cx, C - 1 - cx), max(cy, C - 1 - cy));
#pragma unroll 1
    for (int r = 0; r <= reach; ++r) {
        if (r > 0) {
            float side = INFINITY;
            if (cx + r < C) side = fminf(side, cell_low(cx + r) - xa);
            if (cx - r >= 0) side = fminf(side, xa - cell_high(cx - r));
            if (cy + r < C) side = fminf(side, cell_low(cy + r) - ya);
            if (cy - r >= 0) side = fminf(side, ya - cell_high(cy - r));
            side = fmaxf(side, 0.0f);
            if (__fmul_rn(side, side) > best_d2[K - 1]) break;
        }
        int j0 = max(cy - r, 0), j1 = min(cy + r, C - 1);
#pragma unroll 1
        for (int j = j0; j <= j1; ++j) {
            // Rows cy - r and cy + r of the ring are whole; the rows between hold its two side cells.
            bool whole = j == cy - r || j == cy + r;
            int i0 = whole ? max(cx - r, 0) : cx - r;
            int i1 = whole ? min(cx + r, C - 1) : cx + r;
            float gy = gap(j, cy, ya);
            float gy2 = __fmul_rn(gy, gy);
#pragma unroll 1
            for (int i = i0; i <= i1; i += whole ? 1 : 2 * r) {
                if (i < 0 || i >= C) continue;
                float gx = gap(i, cx, xa);
                if (__fadd_rn(__fmul_rn(gx, gx), gy2) > best_d2[K - 1]) continue;
                int c = j * C + i;
                int end = ends[2 * c + 1];
#pragma unroll 1
                for (int q = bucket_begin(sh, 2 * c); q < end; ++q) {
                    if (q == place) continue;
                    float d2 = squared_distance(x[q] - xa, y[q] - ya);
                    // NaN (a runner tagged this step) and inf never enter; equal distances by id.
                    if (!(d2 <= best_d2[K - 1]) || d2 == INFINITY) continue;
                    unsigned id = (unsigned)ids[q];
                    if (!before(d2, id, best_d2[K - 1], best_id[K - 1])) continue;
                    insert(best_d2, best_id, d2, id);
                }
            }
        }
    }
#pragma unroll
    for (int m = 0; m < K; ++m) out[m] = (int)best_id[m];
}
#else
// Agent a's K nearest others in the game, by (squared distance, id), into ids (-1 for empty slots),
// found by the SPLIT consecutive lanes of one warp: lane `part` scans ids part, part + SPLIT, ...
// into a sorted list in registers, then the lanes merge their lists with shuffles. Scanning in id
// order and moving entries only past strictly larger distances keeps ties in id order within a
// list; the merge breaks ties by id. Every lane of the warp must call this (the shuffles); `active`
// says whether a is real.
__device__ void nearest_others(const TagShared& sh, int a, int part, bool active, int* ids) {
    float best_d2[K];
    int best_id[K];
#pragma unroll
    for (int m = 0; m < K; ++m) {
        best_d2[m] = INFINITY;
        best_id[m] = -1;
    }
    if (active) {
        const float* x = sh.x();
        const float* y = sh.y();
        const bool* in_game = sh.in_game();
        float xa = x[a], ya = y[a];
#pragma unroll 1
        for (int j = part; j < N; j += SPLIT) {
            if (j == a || !in_game[j]) continue;
            float d2 = squared_distance(x[j] - xa, y[j] - ya);
            if (!(d2 < best_d2[K - 1])) continue;
#pragma unroll
            for (int m = K - 1; m > 0; --m) {
                bool shift = d2 < best_d2[m - 1];
                bool place = !shift && d2 < best_d2[m];
                best_d2[m] = shift ? best_d2[m - 1] : (place ? d2 : best_d2[m]);
                best_id[m] = shift ? best_id[m - 1] : (place ? j : best_id[m]);
            }
            if (d2 < best_d2[0]) {
                best_d2[0] = d2;
                best_id[0] = j;
            }
        }
    }
#pragma unroll
    for (int m = 0; m < K; ++m) {
        // The smallest head among the SPLIT lists; an empty slot (INFINITY, -1 = max unsigned) loses.
        float d2 = best_d2[0];
        int id = best_id[0];
#pragma unroll
        for (int offset = 1; offset < SPLIT; offset <<= 1) {
            float other_d2 = __shfl_xor_sync(0xffffffffu, d2, offset);
            int other_id = __shfl_xor_sync(0xffffffffu, id, offset);
            bool take = before(other_d2, (unsigned)other_id, d2, (unsigned)id);
            d2 = take ? other_d2 : d2;
            id = take ? other_id : id;
        }
        if (part == 0 && active) ids[m] = id;
        if (id >= 0 && best_id[0] == id) {  // the lists hold disjoint ids: this lane's head won
#pragma unroll
            for (int q = 0; q < K - 1; ++q) {
                best_d2[q] = best_d2[q + 1];
                best_id[q] = best_id[q + 1];
            }
            best_d2[K - 1] = INFINITY;
            best_id[K - 1] = -1;
        }
    }
}
#endif
#endif

#if TC_FULL_OBSERVATION
#define SLOTS (N - 1)
#else
#define SLOTS K
#endif

// The agent of row `row` of the observation chunks: the grid's order with a grid (nearby agents in
// one warp scan the same cells), else the ids' order.
__device__ __forceinline__ int agent_at(const TagShared& sh, int row) {
#if GRID
    return sh.ids()[row];
#else
    return row;
#endif
}

// Agent j's position after this step's moves (by id: with a grid, the staged copy is in grid order).
__device__ __forceinline__ float pos_x(const EnvState& s, const TagShared& sh, int j) {
#if GRID
    return s.x[j];
#else
    return sh.x()[j];
#endif
}
__device__ __forceinline__ float pos_y(const EnvState& s, const TagShared& sh, int j) {
#if GRID
    return s.y[j];
#else
    return sh.y()[j];
#endif
}

// Feature c of the agent in slot m of agent a's observation (r: a's row within the chunk).
__device__ __forceinline__ float feature(const EnvState& s, const TagShared& sh, int a, int r, int m, int c) {
    const bool* in_game = sh.in_game();
    if (!in_game[a]) return 0.0f;
#if TC_FULL_OBSERVATION
    int j = m < a ? m : m + 1;  // every other agent in id order
#else
    int j = sh.observed()[r * K + m];
    if (j < 0) return 0.0f;
#endif
    switch (c) {
        case 0: return (pos_x(s, sh, j) - pos_x(s, sh, a)) / TC_POSITION_SCALE;
        case 1: return (pos_y(s, sh, j) - pos_y(s, sh, a)) / TC_POSITION_SCALE;
        case 2: return (s.speed[j] - s.speed[a]) / TC_SPEED_SCALE;
        case 3: return (s.acceleration[j] - s.acceleration[a]) / TC_SPEED_SCALE;
        case 4: return (s.direction[j] - s.direction[a]) / TC_TWO_PI;
        case 5: return j < G ? 1.0f : 0.0f;
        default: return in_game[j] ? 1.0f : 0.0f;
    }
}

// Observations of this env's agents at step t (the state rows and the staged positions, and the
// grid if any, must be current and visible to the whole block), a chunk of agents at a time: the
// block finds the chunk's nearest others (SPLIT threads per agent), then writes the chunk's rows one
// feature at a time: the threads of a warp compute the same feature (no divergence over the 7 kinds)
// of consecutive (agent, slot) pairs, whose stores lie 7 floats apart, a few sectors per warp.
__device__ void write_observations(const EnvState& s, TagShared& sh, int t, float* obs) {
    float time = (float)t / (float)TC_EPISODE_LENGTH;
#if TC_FULL_OBSERVATION
    int chunk = blockDim.x;
#else
    int chunk = blockDim.x / SPLIT;
#endif
    const bool* in_game = sh.in_game();
    for (int first = 0; first < N; first += chunk) {
        int rows = min(chunk, N - first);
#if !TC_FULL_OBSERVATION
        int r = threadIdx.x / SPLIT;
#if GRID
        if (r < rows) {
            int a = agent_at(sh, first + r);
            if (in_game[a]) nearest_others(sh, a, first + r, sh.x()[first + r], sh.y()[first + r], sh.observed() + r * K);
        }
#else
        bool active = r < rows && in_game[first + r];
        nearest_others(sh, first + r, threadIdx.x % SPLIT, active, sh.observed() + r * K);
#endif
        __syncthreads();
#endif
        // Element k is feature c = k / pairs of pair p = k % pairs, tracked incrementally (no
        // division by the run-time pair count).
        int pairs = rows * SLOTS;
        int c = threadIdx.x / pairs, p = threadIdx.x % pairs;
#pragma unroll 1
        while (c < FEATURES) {
            int r = p / SLOTS, m = p - r * SLOTS;
            int a = agent_at(sh, first + r);
            obs[(long long)a * TC_OBS_DIM + m * FEATURES + c] = feature(s, sh, a, r, m, c);
            p += blockDim.x;
            while (p >= pairs) {
                p -= pairs;
                ++c;
            }
        }
        for (int r = threadIdx.x; r < rows; r += blockDim.x) {
            int a = agent_at(sh, first + r);
            obs[(long long)a * TC_OBS_DIM + TC_OBS_DIM - 1] = in_game[a] ? time : 0.0f;
        }
        __syncthreads();  // the next chunk overwrites the observed lists
    }
}

__device__ void TagContinuous::observe_env(const State& state, Shared& sh, int e, float* obs, bool*) {
    write_observations(env_rows(state, e), sh, state.t[e], obs);
}

// Runner a (at x, y)'s nearest tagger in the game (ties: lowest id) and its squared distance (inf if
// none), as far as a tag is concerned: with GRID_TAGS, only taggers in the cells within TAG_REACH are
// tested, which hold every tagger a tag could accept (and a tag needs the nearest to be accepted).
__device__ __forceinline__ float nearest_tagger(const EnvState& s, const TagShared& sh, float xa, float ya,
                                                int& nearest) {
    float best = INFINITY;
    nearest = 0;
#if TC_GRID_TAGS
    const float* x = sh.x();
    const float* y = sh.y();
    const int* ids = sh.ids();
    int i0 = cell_of(xa - TC_TAG_REACH), i1 = cell_of(xa + TC_TAG_REACH);
    int j0 = cell_of(ya - TC_TAG_REACH), j1 = cell_of(ya + TC_TAG_REACH);
    for (int j = j0; j <= j1; ++j) {
        for (int i = i0; i <= i1; ++i) {
            int b = 2 * (j * C + i);
            int end = sh.ends()[b];
            for (int q = bucket_begin(sh, b); q < end; ++q) {
                float d2 = squared_distance(xa - x[q], ya - y[q]);
                int id = ids[q];
                if (before(d2, id, best, nearest)) {
                    best = d2;
                    nearest = id;
                }
            }
        }
    }
#else
    const bool* in_game = sh.in_game();
    for (int j = 0; j < G; ++j) {
        if (!in_game[j]) continue;
        float d2 = squared_distance(xa - pos_x(s, sh, j), ya - pos_y(s, sh, j));
        if (d2 < best) {
            best = d2;
            nearest = j;
        }
    }
#endif
    return best;
}

// Spec steps 1-6 of env e; rewards and actions are env e's rows.
__device__ void TagContinuous::step_env(const State& state, Shared& sh, int e, const GmeActionRow& actions,
                                        float* rewards, bool& term, bool& trunc) {
    EnvState s = env_rows(state, e);
    int* tags = sh.tags();
    bool* in_game = sh.in_game();
    // Spec step 1-3: move the agents in the game, their step rewards and edge penalties.
    int now = state.t[e] + 1;
    for (int g = threadIdx.x; g < G; g += blockDim.x) tags[g] = 0;
    if (threadIdx.x == 0) sh.runners_left = 0;
    for (int a = threadIdx.x; a < N; a += blockDim.x) {
        bool playing = s.in_game[a];
        float px = s.x[a], py = s.y[a];
        float reward = 0.0f;
        if (playing) {
            const long long* action = actions.agent(a);
            int acc_index = (int)min(max(action[0], 0LL), (long long)TC_NUM_ACCELERATION_LEVELS);
            int turn_index = (int)min(max(action[1], 0LL), (long long)TC_NUM_TURN_LEVELS);
            float dir = fmodf(s.direction[a] + tc_turn_levels[turn_index], TC_TWO_PI);
            if (dir < 0.0f) dir += TC_TWO_PI;
            if (dir == TC_TWO_PI) dir = 0.0f;
            float acc = s.acceleration[a] + tc_acceleration_levels[acc_index];
            float top = a < G ? TC_MAX_SPEED_TAGGER : TC_MAX_SPEED_RUNNER;
            float v = fminf(fmaxf(s.speed[a] + acc, 0.0f), top);
            if (v == 0.0f || v == top) acc = 0.0f;
            px = __fadd_rn(px, __fmul_rn(v, cosf(dir)));
            py = __fadd_rn(py, __fmul_rn(v, sinf(dir)));
            bool edge = px < 0.0f || px > TC_GRID_LENGTH || py < 0.0f || py > TC_GRID_LENGTH;
            px = fminf(fmaxf(px, 0.0f), TC_GRID_LENGTH);
            py = fminf(fmaxf(py, 0.0f), TC_GRID_LENGTH);
            s.direction[a] = dir;
            s.acceleration[a] = acc;
            s.speed[a] = v;
            s.x[a] = px;
            s.y[a] = py;
            reward = a < G ? TC_STEP_PENALTY_FOR_TAGGER : TC_STEP_REWARD_FOR_RUNNER;
            if (edge) reward = reward + TC_EDGE_HIT_PENALTY;
        }
#if !GRID
        sh.x()[a] = px;
        sh.y()[a] = py;
#endif
        in_game[a] = playing;
        rewards[a] = reward;
    }
    __syncthreads();
#if GRID
    build_grid(s, sh);
#endif

    // Step 4: each runner in the game against its nearest tagger in the game (ties: lowest id). With
    // a grid the runners are visited in its order (their place is where a tagged one is struck out).
    int left = 0;
#if GRID
    for (int q = threadIdx.x; q < sh.ends()[OUT_BUCKET - 1]; q += blockDim.x) {
        int a = sh.ids()[q];
        if (a < G) continue;
        float xa = sh.x()[q], ya = sh.y()[q];
#else
    for (int a = G + threadIdx.x; a < N; a += blockDim.x) {
        if (!in_game[a]) continue;
        float xa = sh.x()[a], ya = sh.y()[a];
#endif
        int nearest;
        float best = nearest_tagger(s, sh, xa, ya, nearest);
        if (sqrtf(best) < TC_TAGGING_RADIUS) {
            atomicAdd(&tags[nearest], 1);
            rewards[a] = rewards[a] + TC_TAG_PENALTY_FOR_RUNNER;
#if TC_RUNNER_EXITS
            // Only runners' flags change here, and this phase reads only taggers' flags and places.
            in_game[a] = s.in_game[a] = false;
            s.speed[a] = 0.0f;
            s.acceleration[a] = 0.0f;
#if GRID
            sh.x()[q] = NAN;  // out of the nearest-others search: no distance to it is ever kept
#endif
#endif
        }
        left += in_game[a];
    }
    if (left) atomicAdd(&sh.runners_left, left);
    __syncthreads();

    // Steps 3-6: taggers' tag rewards, end-of-game rewards, episode end.
    term = sh.runners_left == 0;
    bool last = now == TC_EPISODE_LENGTH;
    trunc = last && !term;
    for (int a = threadIdx.x; a < N; a += blockDim.x) {
        float reward = rewards[a];
        if (a < G) {
            if (tags[a] > 0) reward = __fadd_rn(reward, __fmul_rn((float)tags[a], TC_TAG_REWARD_FOR_TAGGER));
        } else if (last && in_game[a]) {
            reward = reward + TC_END_OF_GAME_REWARD_FOR_RUNNER;
        }
        rewards[a] = reward;
    }
    if (threadIdx.x == 0) state.t[e] = now;
}

extern "C" __global__ void tag_continuous_step(
    int num_envs, float* x, float* y, float* direction, float* speed, float* acceleration, bool* in_game, int* t,
    GmeActions actions, float* observations, float* rewards, bool* agent_terminated, bool* agent_truncated,
    bool* terminated, bool* truncated, float* running_returns, float* episode_returns, float* final_observations,
    bool* final_observation_mask, bool* needs_reset, unsigned int* episodes, const unsigned long long* seeds,
    int autoreset_mode) {
    gme_multi_agent_step<TagContinuous>(num_envs, {x, y, direction, speed, acceleration, in_game, t}, actions,
                                        observations, nullptr, rewards, agent_terminated, agent_truncated, terminated,
                                        truncated, running_returns, episode_returns, nullptr, final_observations,
                                        final_observation_mask, needs_reset, episodes, seeds, autoreset_mode);
}

extern "C" __global__ void tag_continuous_reset(int num_envs, float* x, float* y, float* direction, float* speed,
                                                float* acceleration, bool* in_game, int* t, float* observations,
                                                float* running_returns, const bool* reset_mask, bool* needs_reset,
                                                unsigned int* episodes, const unsigned long long* seeds) {
    gme_multi_agent_reset<TagContinuous>(num_envs, {x, y, direction, speed, acceleration, in_game, t}, observations,
                                         nullptr, running_returns, reset_mask, needs_reset, episodes, seeds);
}
