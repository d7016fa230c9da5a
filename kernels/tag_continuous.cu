// TagContinuous (gpu_marl_envs/envs/tag_continuous.py documents the rules and float32 conventions;
// tag_continuous_reference.py beside it is the torch reference) on the multi-agent template
// (multi_agent.cuh: a block per env, agents spread over its threads, autoreset, returns): this file
// is the game's part, struct TagContinuous. The params arrive as #define TC_* constants
// (kernel_constants in tag_continuous_kernel_layout.py, TC_BLOCK_THREADS the launch's block size),
// the RNG and autoreset constants as GME_* (multi_agent_pycuda.kernel_source).
//
// Race freedom: in each phase a thread writes only the agents (or grid places) it handles in that
// phase (runners are spread over the threads on their own in the tag phase); what other threads read
// (positions, in-game flags, the grid) is staged in shared memory before a barrier; the grid's
// counts and placements, tag counts and the count of runners left are integer atomics, exact in any
// order (the order of agents within a grid cell is arbitrary, and nothing depends on it). A warp
// writes its own nearest-others lists and staged observation features and reads them back after a
// __syncwarp; in a step of two phases each thread writes the lists of the agents it searches for,
// which the warps read after a block barrier.
// No fused multiply-adds where the reference rounds twice: __fmul_rn / __fadd_rn.
#include "float32.cuh"
#include "multi_agent.cuh"

// The largest finite float (FLT_MAX), written out: <cfloat> is not among NVRTC's headers.
#define GME_FLT_MAX 0x1.fffffep+127f

#define N TC_NUM_AGENTS
#define G TC_NUM_TAGGERS
#define K TC_NUM_OBSERVED
#define FEATURES 7
#define C TC_GRID_CELLS  // cells per side of the neighbour grid; 1: no grid (every agent scans every other)
#define GRID (C > 1)
#define OUT_BUCKET (2 * C * C)  // the grid's buckets: cell c's taggers (2c), its runners (2c + 1), then the agents out of the game
// An observation's difference over one of its scales (TC_POSITION_SCALE, TC_SPEED_SCALE, TC_TWO_PI), as
// a true float32 division with the scale's reciprocal (gme_divide; kernel_constants' *_RECIPROCAL).
#define SCALED(difference, SCALE) \
    gme_divide(difference, TC_##SCALE, TC_##SCALE##_RECIPROCAL, TC_##SCALE##_RECIPROCAL_EXACT)

__constant__ float tc_acceleration_levels[TC_NUM_ACCELERATION_LEVELS + 1] = TC_ACCELERATION_LEVELS;
__constant__ float tc_turn_levels[TC_NUM_TURN_LEVELS + 1] = TC_TURN_LEVELS;

// The per-agent arrays live in dynamic shared memory (a game of thousands of agents needs more than
// the 48 KiB of static shared memory a block may declare), at the byte offsets TC_SHARED_* of
// shared_layout() in tag_continuous_kernel_layout.py, which documents each array.
extern __shared__ __align__(16) unsigned char tc_dynamic[];

struct TagShared {
    int runners_left;  // runners in the game after this step's tags
#if TC_TWO_PHASE
    bool two_phase;    // this step finds the nearest others in two phases (build_grid)
#endif

    __device__ float2* positions() const { return (float2*)(tc_dynamic + TC_SHARED_POSITIONS); }
    __device__ float* motion() const { return (float*)(tc_dynamic + TC_SHARED_MOTION); }
    __device__ unsigned short* ids() const { return (unsigned short*)(tc_dynamic + TC_SHARED_IDS); }
    __device__ int* ends() const { return (int*)(tc_dynamic + TC_SHARED_ENDS); }
    __device__ int* tags() const { return (int*)(tc_dynamic + TC_SHARED_TAGS); }
    __device__ int* observed() const { return (int*)(tc_dynamic + TC_SHARED_OBSERVED); }
    __device__ float* features() const { return (float*)(tc_dynamic + TC_SHARED_FEATURES); }
    __device__ unsigned short* places() const { return (unsigned short*)(tc_dynamic + TC_SHARED_PLACES); }
    __device__ short* lists() const { return (short*)(tc_dynamic + TC_SHARED_LISTS); }
    __device__ bool* in_game() const { return (bool*)(tc_dynamic + TC_SHARED_IN_GAME); }
#if TC_TWO_PHASE_STAGE_MOTION
    // The staged motion of a step of two phases, whose lists fill the room of motion()'s.
    __device__ float* two_phase_motion() const { return (float*)(tc_dynamic + TC_SHARED_TWO_PHASE_MOTION); }
#endif
    // This step's staged motion, where motion_staged (after build_grid's scan, with a grid).
    __device__ float* step_motion() const {
#if TC_TWO_PHASE_STAGE_MOTION
        return two_phase ? two_phase_motion() : motion();
#else
        return motion();
#endif
    }
};

struct EnvState {  // one env's rows of the state arrays
    float* x;
    float* y;
    float* direction;
    float* speed;
    float* acceleration;
    bool* in_game;
};

static_assert(GME_OBS_SIZE == N * TC_OBS_DIM && GME_ACTION_SIZE == 2 && GME_BLOCK_THREADS == TC_BLOCK_THREADS,
              "the reference module's layout and block");

// The game, as multi_agent.cuh calls it.
struct TagContinuous : GmeGame {
    typedef TagShared Shared;

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

// Agent data at `place` of the staged arrays (the grid's order with a grid, else the ids'): the
// speed, acceleration and direction the observations compare, where shared memory has room for them
// (`staged`: this step's motion, TagShared::step_motion).
__device__ __forceinline__ void stage_motion(float* staged, int place, float speed, float acceleration,
                                             float direction) {
    float* motion = staged + 3 * place;
    motion[0] = speed;
    motion[1] = acceleration;
    motion[2] = direction;
}

// Whether this step's motion is staged (after build_grid's scan, with a grid): with TC_TWO_PHASE
// but not TC_TWO_PHASE_STAGE_MOTION, only in a step of one phase (the two phases' lists fill its
// room, and the features' room has none to spare).
__device__ __forceinline__ bool motion_staged(const TagShared& sh) {
#if TC_TWO_PHASE && !TC_TWO_PHASE_STAGE_MOTION
    return TC_STAGE_MOTION && !sh.two_phase;
#else
    return TC_STAGE_MOTION;
#endif
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
// into positions and ids (and motion, where staged); ends[b] is where bucket b ends. Needs the state rows' positions and the staged
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
#if TC_TWO_PHASE
        __syncwarp();  // the out-of-game bucket's start is the number of agents in the game
        if (lane == 0) sh.two_phase = ends[OUT_BUCKET] <= TC_TWO_PHASE_MAX_IN_PLAY;
#endif
    }
    __syncthreads();
    float2* positions = sh.positions();
    unsigned short* ids = sh.ids();
    for (int a = threadIdx.x; a < N; a += blockDim.x) {
        float px = s.x[a], py = s.y[a];
        int b = in_game[a] ? 2 * (cell_of(py) * C + cell_of(px)) + (a >= G) : OUT_BUCKET;
        int place = atomicAdd(&ends[b], 1);  // the bucket's start, advanced: afterwards its end
        positions[place] = make_float2(px, py);
        ids[place] = (unsigned short)a;
#if TC_ROWS_BY_ID
        sh.places()[a] = (unsigned short)place;
#endif
#if TC_STAGE_MOTION
        if (motion_staged(sh)) stage_motion(sh.step_motion(), place, s.speed[a], s.acceleration[a], s.direction[a]);
#endif
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
        sh.positions()[a] = make_float2(x, y);
#if TC_STAGE_MOTION
        stage_motion(sh.motion(), a, 0.0f, 0.0f, quarter * TC_HALF_PI);
#endif
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

// A slot of a nearest-others list: a place, -1 if empty. With TC_TWO_PHASE the lists are kept in
// `lists`, 16 bits a slot (every agent's, or in a step of one phase each warp's); otherwise a warp's
// few lists (`observed`).
#if TC_TWO_PHASE
typedef short ListSlot;
#else
typedef int ListSlot;
#endif

#if !TC_FULL_OBSERVATION
#define SPLIT TC_SCAN_SPLIT  // lanes that share one observer's scan (a power of 2, at most 32; 1 with a grid)

#if GRID
// A candidate's order in the exact nearest-others list: its squared distance's bits (a non-negative
// float orders as its bits) above its id above its place (16 bits each: the grid holds at most
// 65,536 agents), so that keys order as (distance, id); an empty slot is all ones below inf's bits.
__device__ __forceinline__ unsigned long long key_of(float d2, unsigned id, unsigned place) {
    return ((unsigned long long)__float_as_uint(d2) << 32) | (id << 16) | place;
}
constexpr unsigned long long EMPTY_KEY = 0x7f800000ffffffffull;

// Both lists below keep their entries sorted in registers (K is a compile-time constant, so after
// unrolling every index is one) and take a new entry into every slot at once, with no chain
// through the slots: slot m takes its left neighbour's entry if the new one goes before that, the
// new one if it goes between, else keeps its own.

// The exact nearest-others list, by (squared distance, id) in 64-bit keys.
struct NearestList {
    unsigned long long best[K];
    float last;  // the list's last distance, or the largest float while it has room

    __device__ __forceinline__ NearestList() : last(GME_FLT_MAX) {
#pragma unroll
        for (int m = 0; m < K; ++m) best[m] = EMPTY_KEY;
    }
    // The agent at place q of the grid's order (not the observer's own place), at squared distance d2.
    __device__ __forceinline__ void consider(const TagShared& sh, int q, int place, float d2) {
        // NaN (a runner tagged this step) and inf never enter.
        if (!(d2 <= last) || q == place) return;
        unsigned long long key = key_of(d2, sh.ids()[q], q);
        if (key >= best[K - 1]) return;
        bool after[K];  // the new key goes after slot m's
#pragma unroll
        for (int m = 0; m < K; ++m) after[m] = best[m] < key;
#pragma unroll
        for (int m = K - 1; m > 0; --m) best[m] = after[m] ? best[m] : (after[m - 1] ? key : best[m - 1]);
        if (!after[0]) best[0] = key;
        last = fminf(__uint_as_float((unsigned)(best[K - 1] >> 32)), GME_FLT_MAX);
    }
    __device__ __forceinline__ float limit() const { return last; }
    __device__ __forceinline__ int place(int m) const { return best[m] == EMPTY_KEY ? -1 : (int)(best[m] & 0xffffu); }
};

constexpr unsigned PLACE_MASK = (1u << TC_PLACE_BITS) - 1u;  // the bits of a place of the grid's order
constexpr unsigned EMPTY_PACKED = 0x7f800000u;  // inf's bits: above every finite distance's key

// The packed list, the search's first try: 32-bit keys, a squared distance's bits with its lowest
// bits replaced by the place (so keys order by the truncated distance, then by place), sorted with
// a min and a max per slot, a third of the exact list's work per entry taken (which is the hottest
// code of the step). It keeps K + 1 entries, so that it can tell where it may differ from the exact
// list: every candidate it left out has a key above its last (K + 1-th) one, or lies beyond the
// bound of the cells it did not scan, which is at least the K-th entry's largest distance. So when
// the K-th and K + 1-th truncated distances differ, every candidate left out is strictly farther
// than all K entries: the list holds the right agents (see nearest_others for their order).
struct PackedList {
    unsigned best[K + 1];

    __device__ __forceinline__ PackedList() {
#pragma unroll
        for (int m = 0; m <= K; ++m) best[m] = EMPTY_PACKED;
    }
    __device__ __forceinline__ void consider(const TagShared&, int q, int place, float d2) {
        // NaN (a runner tagged this step) and inf give keys at or above the empty slot's: never in.
        unsigned key = (__float_as_uint(d2) & ~PLACE_MASK) | (unsigned)q;
        if (!(key < best[K]) || q == place) return;
#pragma unroll
        for (int m = K; m > 0; --m) best[m] = max(best[m - 1], min(best[m], key));
        best[0] = min(best[0], key);
    }
    // The largest squared distance the K-th entry may stand for (inf while the list has room).
    __device__ __forceinline__ float limit() const {
        return best[K - 1] == EMPTY_PACKED ? INFINITY : __uint_as_float(best[K - 1] | PLACE_MASK);
    }
    __device__ __forceinline__ static unsigned truncated(unsigned key) { return key & ~PLACE_MASK; }
    // Whether the K entries are the K nearest (see above).
    __device__ __forceinline__ bool right_agents() const {
        return best[K] == EMPTY_PACKED || truncated(best[K - 1]) < truncated(best[K]);
    }
    // Whether the K entries' truncated distances all differ, so that their order is the exact one.
    __device__ __forceinline__ bool distinct() const {
        bool equal = false;
#pragma unroll
        for (int m = 0; m + 1 < K; ++m)
            equal |= best[m + 1] != EMPTY_PACKED && truncated(best[m]) == truncated(best[m + 1]);
        return !equal;
    }
    __device__ __forceinline__ int place(int m) const {
        return best[m] == EMPTY_PACKED ? -1 : (int)(best[m] & PLACE_MASK);
    }
};

// Whether cell (i, j) may hold an agent nearer than `limit`, seen from (xa, ya) in (cx, cy).
__device__ __forceinline__ bool may_hold(int i, int j, int cx, int cy, float xa, float ya, float limit) {
    float gx = gap(i, cx, xa), gy = gap(j, cy, ya);
    return !(__fadd_rn(__fmul_rn(gx, gx), __fmul_rn(gy, gy)) > limit);
}

// The K nearest others in the game of the agent at place `place` of the grid's order (at `own`)
// into `list`. First the 3 x 3 block of cells around its own: in the grid's row-major order a
// row's three cells are one run of places, so the block is three runs (its own row, then the
// nearer, then the farther), read as one flat sequence so that a lane never waits at a cell's or a
// run's end for the others. Then rings of cells further out, nearest ring first: before ring r,
// every agent not yet scanned lies in a column or row at least r cells away, hence at a squared
// distance no less than the square of the nearest such side's gap; once that bound exceeds the
// list's limit (the largest distance its last entry may stand for), nothing unscanned can enter it. A ring's cell whose own bound exceeds it
// is skipped. The order of the scan does not matter to the exact list: keys order by (distance, id).
template <class List>
__device__ __forceinline__ void search_cells(const TagShared& sh, int place, float2 own, List& list) {
    float xa = own.x, ya = own.y;
    const float2* positions = sh.positions();
    const int* ends = sh.ends();
    int cx = cell_of(xa), cy = cell_of(ya);
    int sy = ya * TC_INV_CELL_SIZE - (float)cy >= 0.5f ? 1 : -1;  // towards the nearer row
    int i0 = max(cx - 1, 0), i1 = min(cx + 1, C - 1);
    // The runs: rows cy, cy + sy, cy - sy (a row off the grid is an empty run); sequence position t
    // is place t + shift[r] in run r, which ends before stop[r] (the last run ends at total).
    int shift[3], stop[2], total = 0;
#pragma unroll
    for (int r = 0; r < 3; ++r) {
        int j = r == 0 ? cy : (r == 1 ? cy + sy : cy - sy);
        bool row = j >= 0 && j < C;
        int begin = row ? bucket_begin(sh, 2 * (j * C + i0)) : 0, end = row ? ends[2 * (j * C + i1) + 1] : 0;
        shift[r] = begin - total;
        total += end - begin;
        if (r < 2) stop[r] = total;
    }
#pragma unroll 1
    for (int t = 0; t < total; t += 2) {
        // Two candidates at a time (the second may be past the sequence's end: then it is ignored),
        // their loads in flight together.
        int t1 = min(t + 1, total - 1);
        int q0 = t + (t < stop[0] ? shift[0] : (t < stop[1] ? shift[1] : shift[2]));
        int q1 = t1 + (t1 < stop[0] ? shift[0] : (t1 < stop[1] ? shift[1] : shift[2]));
        float2 p0 = positions[q0], p1 = positions[q1];
        float d0 = squared_distance(p0.x - xa, p0.y - ya), d1 = squared_distance(p1.x - xa, p1.y - ya);
        list.consider(sh, q0, place, d0);
        if (t + 1 < total) list.consider(sh, q1, place, d1);
    }
    int reach = max(max(cx, C - 1 - cx), max(cy, C - 1 - cy));
#pragma unroll 1
    for (int r = 2; r <= reach; ++r) {
        float side = INFINITY;
        if (cx + r < C) side = fminf(side, cell_low(cx + r) - xa);
        if (cx - r >= 0) side = fminf(side, xa - cell_high(cx - r));
        if (cy + r < C) side = fminf(side, cell_low(cy + r) - ya);
        if (cy - r >= 0) side = fminf(side, ya - cell_high(cy - r));
        side = fmaxf(side, 0.0f);
        if (__fmul_rn(side, side) > list.limit()) break;
#pragma unroll 1
        for (int j = max(cy - r, 0); j <= min(cy + r, C - 1); ++j) {
            // Rows cy - r and cy + r of the ring are whole; the rows between hold its two side cells.
            bool whole = j == cy - r || j == cy + r;
#pragma unroll 1
            for (int i = whole ? max(cx - r, 0) : cx - r; i <= (whole ? min(cx + r, C - 1) : cx + r);
                 i += whole ? 1 : 2 * r) {
                if (i < 0 || i >= C || !may_hold(i, j, cx, cy, xa, ya, list.limit())) continue;
                int c = j * C + i;
#pragma unroll 1
                for (int q = bucket_begin(sh, 2 * c); q < ends[2 * c + 1]; ++q) {
                    float2 p = positions[q];
                    list.consider(sh, q, place, squared_distance(p.x - xa, p.y - ya));
                }
            }
        }
    }
}

// The exact list's search, where the packed list cannot vouch for its agents (rare: truncated
// distances equal at its boundary). Inline: out of line, the call's saved registers made the step
// 7% slower on an H100.
__device__ __forceinline__ void exact_nearest_others(const TagShared& sh, int place, float2 own, ListSlot* out) {
    NearestList list;
    search_cells(sh, place, own, list);
#pragma unroll
    for (int m = 0; m < K; ++m) out[m] = list.place(m);
}

// The K nearest others in the game of the agent at place `place` (at `own`), by (squared distance,
// id), into out: their places, -1 for empty slots. The packed list's search; where its entries are
// the right agents but two of them have equal truncated distances (agents at nearly or exactly
// the same distance), their exact order from the exact list's insertion of those K alone; where
// it cannot vouch for its agents, the exact list's search.
__device__ void nearest_others(const TagShared& sh, int place, float2 own, ListSlot* out) {
    PackedList packed;
    search_cells(sh, place, own, packed);
    if (!packed.right_agents()) {
        exact_nearest_others(sh, place, own, out);
        return;
    }
    if (packed.distinct()) {
#pragma unroll
        for (int m = 0; m < K; ++m) out[m] = packed.place(m);
        return;
    }
    NearestList list;
#pragma unroll
    for (int m = 0; m < K; ++m) {
        int q = packed.place(m);
        if (q < 0) break;
        float2 p = sh.positions()[q];
        list.consider(sh, q, place, squared_distance(p.x - own.x, p.y - own.y));
    }
#pragma unroll
    for (int m = 0; m < K; ++m) out[m] = list.place(m);
}
#else
// Agent a's K nearest others in the game, by (squared distance, id), into ids (their ids, which are
// their places without a grid; -1 for empty slots),
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
        const float2* positions = sh.positions();
        const bool* in_game = sh.in_game();
        float xa = positions[a].x, ya = positions[a].y;
#pragma unroll 1
        for (int j = part; j < N; j += SPLIT) {
            if (j == a || !in_game[j]) continue;
            float2 p = positions[j];
            float d2 = squared_distance(p.x - xa, p.y - ya);
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

// The id of the agent at `place` of the staged arrays: the grid's order with a grid, else the ids'.
__device__ __forceinline__ int id_at(const TagShared& sh, int place) {
#if GRID
    return sh.ids()[place];
#else
    return place;
#endif
}

// The observation rows go by agent id (TC_ROWS_BY_ID, rows_by_id in tag_continuous_kernel_layout.py: a
// chunk's rows are then one run of the buffer, whose stores fill whole sectors) or, in the largest
// games, in the grid's order (a warp's agents are neighbours: they search the same cells). Row
// `row` of that order: its agent, and the agent's place in the staged arrays.
__device__ __forceinline__ int row_agent(const TagShared& sh, int row) { return TC_ROWS_BY_ID ? row : id_at(sh, row); }
__device__ __forceinline__ int row_place(const TagShared& sh, int row) {
#if GRID && TC_ROWS_BY_ID
    return sh.places()[row];
#else
    return row;  // the grid's order, or by id without a grid: the staged arrays' own order
#endif
}

#if TC_FULL_OBSERVATION
constexpr int GROUP = 32;  // rows a warp takes at a time
#else
constexpr int GROUP = 32 / SPLIT;  // rows a warp takes at a time
#endif

// Of 1 to `most` rows a chunk, the one that stages a warp's GROUP rows (`slots` (row, slot) pairs a
// row) in the fewest passes of its 32 lanes (a pass costs as much with idle lanes), ties to the most
// rows (fewer chunks). With k = 10 and GROUP 32: 3 rows of at most 4 (11 passes; 4 rows take two
// passes, the second a quarter full: 16), 6 of at most 8 (11 passes; 8 rows: 12). On an H200 at
// 2,000 x 1,000 with the published rules, 1.01x faster (docs/benchmarks/history.md).
constexpr int chunk_rows(int most, int slots) {
    int best = 1, fewest = GROUP * ((slots + 31) / 32);
    for (int rows = 2; rows <= most; ++rows) {
        int passes = GROUP / rows * ((rows * slots + 31) / 32) + (GROUP % rows * slots + 31) / 32;
        if (passes <= fewest) {
            best = rows;
            fewest = passes;
        }
    }
    return best;
}

// The observation features of a warp's rows are staged in its part of shared memory, FLOATS floats
// (TC_STAGE_FLOATS; in a step of two phases TC_TWO_PHASE_STAGE_FLOATS), a chunk of ROWS rows x SLOTS
// slots at a time (each row's features and, with its last slot, its time: contiguous in the row),
// and stored from there a row segment after another.
constexpr int OBSERVED_SLOTS = TC_FULL_OBSERVATION ? N - 1 : K;
template <int STAGE_FLOATS>
struct Staging {
    static constexpr int FLOATS = STAGE_FLOATS;
    static constexpr int SLOTS = OBSERVED_SLOTS < (FLOATS - 1) / FEATURES ? OBSERVED_SLOTS : (FLOATS - 1) / FEATURES;
    static constexpr int ROW_STRIDE = SLOTS * FEATURES + 1;  // a staged row: its features, then its time
    static constexpr int ROWS = chunk_rows(FLOATS / ROW_STRIDE, SLOTS);
};

// The speed, acceleration and direction of agent a (at place `own`) and of agent j (at place q) that
// the observations compare: the staged motion's (STAGED), else the state's.
template <bool STAGED>
struct Motions;
template <>
struct Motions<true> {
    const float *own, *other;
    __device__ __forceinline__ Motions(const EnvState&, const float* motion, int own_place, int q, int, int)
        : own(motion + 3 * own_place), other(motion + 3 * q) {}
};
template <>
struct Motions<false> {
    float own[3], other[3];
    __device__ __forceinline__ Motions(const EnvState& s, const float*, int, int, int a, int j)
        : own{s.speed[a], s.acceleration[a], s.direction[a]}, other{s.speed[j], s.acceleration[j], s.direction[j]} {}
};

// Features m0.. of rows first.. (of row_agent's order; at most Stage::ROWS rows, Stage::SLOTS slots),
// a (row, slot) pair per lane and pass: every lane does the same work, whatever kinds of feature its
// stores hold; a pair of an agent out of the game, or an empty slot, is only zeros. `lists`: the
// rows' nearest-others lists (partial observation); `motion`: this step's staged motion (where
// MOTION_STAGED; otherwise the motion is read from the state).
template <class Stage, bool MOTION_STAGED>
__device__ void stage_features(const EnvState& s, const TagShared& sh, const ListSlot* lists, const float* motion,
                               int first, int rows, int m0, int slots, float time, float* staged) {
    const bool* in_game = sh.in_game();
    bool last = m0 + slots == OBSERVED_SLOTS;  // the rows' times come with their last slots
    for (int p = threadIdx.x % 32; p < rows * slots; p += 32) {
        int r = p / slots, n = p - r * slots, m = m0 + n;
        int a = row_agent(sh, first + r), own = row_place(sh, first + r);
        bool playing = in_game[a];
#if TC_FULL_OBSERVATION
        int q = m < a ? m : m + 1;  // every other agent in id order (their places: no grid here)
#else
        int q = lists[r * K + m];
#endif
        bool seen = playing && q >= 0;
        float* row = staged + r * Stage::ROW_STRIDE;
        if (seen) {
            int j = id_at(sh, q);
            float2 mine = sh.positions()[own], other = sh.positions()[q];
            Motions<MOTION_STAGED> motions(s, motion, own, q, a, j);
            const float* own_motion = motions.own;
            const float* other_motion = motions.other;
            float features[FEATURES] = {
                SCALED(other.x - mine.x, POSITION_SCALE),
                SCALED(other.y - mine.y, POSITION_SCALE),
                SCALED(other_motion[0] - own_motion[0], SPEED_SCALE),
                SCALED(other_motion[1] - own_motion[1], SPEED_SCALE),
                SCALED(other_motion[2] - own_motion[2], TWO_PI),
                j < G ? 1.0f : 0.0f,
                in_game[j] ? 1.0f : 0.0f,
            };
#pragma unroll
            for (int c = 0; c < FEATURES; ++c) row[n * FEATURES + c] = features[c];
        } else {
            // An agent out of the game or an empty slot: zeros, nothing computed.
#pragma unroll
            for (int c = 0; c < FEATURES; ++c) row[n * FEATURES + c] = 0.0f;
        }
        if (last && n == 0) row[slots * FEATURES] = playing ? time : 0.0f;
    }
}

// Each warp takes groups of GROUP consecutive rows (row_agent) on its own (no block-wide barrier):
// in a step of one phase its lanes first find the group's nearest others (SPLIT lanes per agent)
// into the warp's lists (TWO_PHASES: every agent's list is already in `lists`); it stages the
// rows' features in chunks (Stage) and stores each chunk, consecutive lanes writing consecutive
// floats. By id, a chunk's rows are one run of the buffer (an H100 took 543 µs to store 2,000 x
// 1,000 rows of 71 floats a row at a time in a random order of each game's rows, 238 in id order,
// 181 as one run a warp: docs/benchmarks/history.md). `motion`: this step's staged motion.
template <bool TWO_PHASES, bool MOTION_STAGED, class Stage>
__device__ __forceinline__ void write_rows(const EnvState& s, TagShared& sh, float time, float* obs,
                                           const float* motion) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
#if !TC_TWO_PHASE
    ListSlot* lists = sh.observed() + warp * GROUP * K;  // this warp's nearest-others lists (partial observation)
#endif
    float* staged = sh.features() + warp * Stage::FLOATS;
    for (int first = warp * GROUP; first < N; first += warps * GROUP) {
        int rows = min(GROUP, N - first);
#if !TC_FULL_OBSERVATION
#if TC_TWO_PHASE
        // Two phases: the group's rows' lists (row_agent: by id). One: the warp's own lists, at the
        // start of the same shared array.
        ListSlot* lists = sh.lists() + (TWO_PHASES ? first : warp * GROUP) * K;
#endif
        if (!TWO_PHASES) {  // the group's nearest others, into the warp's lists
            int r = lane / SPLIT;
            const bool* in_game = sh.in_game();
#if GRID
            if (r < rows && in_game[row_agent(sh, first + r)]) {
                int place = row_place(sh, first + r);
                nearest_others(sh, place, sh.positions()[place], lists + r * K);
            }
#else
            nearest_others(sh, first + r, lane % SPLIT, r < rows && in_game[first + r], lists + r * K);
#endif
            __syncwarp();
        }
#endif
        for (int r0 = 0; r0 < rows; r0 += Stage::ROWS) {
            int chunk_rows = min(Stage::ROWS, rows - r0);
            for (int m0 = 0; m0 < OBSERVED_SLOTS; m0 += Stage::SLOTS) {
                int slots = min(Stage::SLOTS, OBSERVED_SLOTS - m0);
                stage_features<Stage, MOTION_STAGED>(s, sh, lists + r0 * K, motion, first + r0, chunk_rows, m0, slots,
                                                     time, staged);
                __syncwarp();
                int length = slots * FEATURES + (m0 + slots == OBSERVED_SLOTS);  // a row segment
#if TC_ROWS_BY_ID
                float* segment = obs + (first + r0) * TC_OBS_DIM + m0 * FEATURES;
                if (Stage::ROW_STRIDE == TC_OBS_DIM) {  // whole rows staged: the chunk is one run of the buffer
                    for (int w = lane; w < chunk_rows * TC_OBS_DIM; w += 32) segment[w] = staged[w];
                } else {  // a row segment after another
                    for (int r = 0; r < chunk_rows; ++r) {
                        for (int w = lane; w < length; w += 32)
                            segment[r * TC_OBS_DIM + w] = staged[r * Stage::ROW_STRIDE + w];
                    }
                }
#else
                // A row segment at a time (a flat walk over the chunk's floats spent a division and a
                // 64-bit address on each). Lane r holds row r's offset and the loop takes it by a
                // shuffle, unrolled: read from shared memory in the loop, each row's id held up its
                // stores.
                int offset = lane < chunk_rows ? id_at(sh, first + r0 + lane) * TC_OBS_DIM + m0 * FEATURES : 0;
#pragma unroll
                for (int r = 0; r < (Stage::ROWS < GROUP ? Stage::ROWS : GROUP); ++r) {  // a chunk's rows at most
                    float* segment = obs + __shfl_sync(0xffffffffu, offset, r);
                    const float* row = staged + r * Stage::ROW_STRIDE;
                    if (r < chunk_rows) {
                        for (int w = lane; w < length; w += 32) segment[w] = row[w];
                    }
                }
#endif
                __syncwarp();  // the next chunk overwrites the staged features
            }
        }
        __syncwarp();  // the warp's next group overwrites its lists
    }
}

// Observations of this env's agents at step t (the state rows, the staged positions and the grid if
// any must be current and visible to the whole block), by write_rows. With TC_TWO_PHASE, in a step
// where at most TC_TWO_PHASE_MAX_IN_PLAY agents are in the game (a thinned game), every agent in
// the game first finds its nearest others into its list, a thread per place of the grid's order (a
// warp's agents are neighbours: they search the same cells; the agents out of the game, the order's
// last, take no thread), then a block barrier; with TC_TWO_PHASE_STAGE_MOTION the rows are then
// staged in smaller chunks (TC_TWO_PHASE_STAGE_FLOATS), whose room the step's staged motion shares.
__device__ void write_observations(const EnvState& s, TagShared& sh, int t, float* obs) {
    float time = (float)t / (float)TC_EPISODE_LENGTH;
#if TC_TWO_PHASE
    const bool* in_game = sh.in_game();
    int in_play = sh.ends()[OUT_BUCKET - 1];  // where the agents out of the game begin
    // build_grid's choice (sh.two_phase), taken again from the ends: reading the flag here made the
    // kernel spill registers at 1,000 agents. Block-uniform, so the barrier below is too.
    if (in_play <= TC_TWO_PHASE_MAX_IN_PLAY) {
        for (int place = threadIdx.x; place < in_play; place += blockDim.x) {
            int a = id_at(sh, place);
            // A runner tagged this step is still in its cell, out of the game: no list.
            if (in_game[a]) nearest_others(sh, place, sh.positions()[place], sh.lists() + a * K);
        }
        __syncthreads();
#if TC_TWO_PHASE_STAGE_MOTION
        write_rows<true, true, Staging<TC_TWO_PHASE_STAGE_FLOATS>>(s, sh, time, obs, sh.two_phase_motion());
#else
        write_rows<true, false, Staging<TC_STAGE_FLOATS>>(s, sh, time, obs, nullptr);
#endif
        return;
    }
#endif
    write_rows<false, TC_STAGE_MOTION, Staging<TC_STAGE_FLOATS>>(s, sh, time, obs, sh.motion());
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
    const float2* positions = sh.positions();
    const unsigned short* ids = sh.ids();
    int i0 = cell_of(xa - TC_TAG_REACH), i1 = cell_of(xa + TC_TAG_REACH);
    int j0 = cell_of(ya - TC_TAG_REACH), j1 = cell_of(ya + TC_TAG_REACH);
    for (int j = j0; j <= j1; ++j) {
        for (int i = i0; i <= i1; ++i) {
            int b = 2 * (j * C + i);
            int end = sh.ends()[b];
            for (int q = bucket_begin(sh, b); q < end; ++q) {
                float d2 = squared_distance(xa - positions[q].x, ya - positions[q].y);
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
        // By id: with a grid the state's (the staged positions are in the grid's order).
        float2 p = GRID ? make_float2(s.x[j], s.y[j]) : sh.positions()[j];
        float d2 = squared_distance(xa - p.x, ya - p.y);
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
        // Every agent's move is computed, in play or not, and kept where it is in play: its state
        // and action are read together, in one round trip to global memory. (Where only agents in
        // play read them, the compiler sank the reads under the in-game flag's, and the waits on
        // the two were a seventh of the step's stall samples with the published rules.)
        bool playing = s.in_game[a];
        float px = s.x[a], py = s.y[a];
        float dir = s.direction[a], acc = s.acceleration[a], v = s.speed[a];
        const long long* action = actions.agent(a);
        int acc_index = (int)min(max(action[0], 0LL), (long long)TC_NUM_ACCELERATION_LEVELS);
        int turn_index = (int)min(max(action[1], 0LL), (long long)TC_NUM_TURN_LEVELS);
        float moved_dir = fmodf(dir + tc_turn_levels[turn_index], TC_TWO_PI);
        if (moved_dir < 0.0f) moved_dir += TC_TWO_PI;
        if (moved_dir == TC_TWO_PI) moved_dir = 0.0f;
        float moved_acc = acc + tc_acceleration_levels[acc_index];
        float top = a < G ? TC_MAX_SPEED_TAGGER : TC_MAX_SPEED_RUNNER;
        float moved_v = fminf(fmaxf(v + moved_acc, 0.0f), top);
        if (moved_v == 0.0f || moved_v == top) moved_acc = 0.0f;
        float moved_x = __fadd_rn(px, __fmul_rn(moved_v, cosf(moved_dir)));
        float moved_y = __fadd_rn(py, __fmul_rn(moved_v, sinf(moved_dir)));
        bool edge = moved_x < 0.0f || moved_x > TC_GRID_LENGTH || moved_y < 0.0f || moved_y > TC_GRID_LENGTH;
        float reward = a < G ? TC_STEP_PENALTY_FOR_TAGGER : TC_STEP_REWARD_FOR_RUNNER;
        reward = !playing ? 0.0f : (edge ? reward + TC_EDGE_HIT_PENALTY : reward);
        if (playing) {
            dir = moved_dir;
            acc = moved_acc;
            v = moved_v;
            px = fminf(fmaxf(moved_x, 0.0f), TC_GRID_LENGTH);
            py = fminf(fmaxf(moved_y, 0.0f), TC_GRID_LENGTH);
            s.direction[a] = dir;
            s.acceleration[a] = acc;
            s.speed[a] = v;
            s.x[a] = px;
            s.y[a] = py;
        }
#if !GRID
        sh.positions()[a] = make_float2(px, py);
#if TC_STAGE_MOTION
        stage_motion(sh.motion(), a, v, acc, dir);
#endif
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
    for (int place = threadIdx.x; place < sh.ends()[OUT_BUCKET - 1]; place += blockDim.x) {
        int a = sh.ids()[place];
        if (a < G) continue;
#else
    for (int a = G + threadIdx.x; a < N; a += blockDim.x) {
        if (!in_game[a]) continue;
        int place = a;
#endif
        float xa = sh.positions()[place].x, ya = sh.positions()[place].y;
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
#if TC_STAGE_MOTION
            if (motion_staged(sh)) sh.step_motion()[3 * place] = sh.step_motion()[3 * place + 1] = 0.0f;
#endif
#if GRID
            sh.positions()[place].x = NAN;  // out of the nearest-others search: no distance to it is ever kept
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

// At most 65,536 / (TC_MIN_BLOCKS x TC_BLOCK_THREADS) registers per thread in the step kernel, so that that
// many blocks run on an SM at once (see min_blocks_per_sm in tag_continuous_kernel_layout.py).
GME_MULTI_AGENT_KERNELS_BOUNDED(TagContinuous, TC_MIN_BLOCKS)
