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

__constant__ float tc_acceleration_levels[TC_NUM_ACCELERATION_LEVELS + 1] = TC_ACCELERATION_LEVELS;
__constant__ float tc_turn_levels[TC_NUM_TURN_LEVELS + 1] = TC_TURN_LEVELS;

struct TagShared {
    int tags[G];       // runners each tagger tagged this step
    int runners_left;  // runners in the game after this step's tags
#if !TC_FULL_OBSERVATION
    int observed[TC_BLOCK_THREADS / TC_SCAN_SPLIT * K];  // the nearest others of each agent of a chunk
#endif
    float x[N];
    float y[N];
    bool in_game[N];
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
    __device__ static bool in_game(const State&, const Shared& sh, int, int a) { return sh.in_game[a]; }
    __device__ static void observe_env(const State& state, Shared& sh, int e, float* obs, bool*);
};

__device__ __forceinline__ EnvState env_rows(const TagContinuous::State& s, int e) {
    long long o = (long long)e * N;
    return EnvState{s.x + o, s.y + o, s.direction + o, s.speed + o, s.acceleration + o, s.in_game + o};
}

__device__ __forceinline__ float squared_distance(float dx, float dy) {
    return __fadd_rn(__fmul_rn(dx, dx), __fmul_rn(dy, dy));
}

__device__ void TagContinuous::reset_env(const State& state, Shared& sh, int e, unsigned long long seed,
                                         unsigned int episode) {
    EnvState s = env_rows(state, e);
    for (int a = threadIdx.x; a < N; a += blockDim.x) {
        float x = gme_uniform(seed, episode, a, 0.0f, TC_GRID_LENGTH);
        float y = gme_uniform(seed, episode, N + a, 0.0f, TC_GRID_LENGTH);
        float quarter = floorf(gme_uniform(seed, episode, 2 * N + a, 0.0f, 4.0f));
        s.x[a] = sh.x[a] = x;
        s.y[a] = sh.y[a] = y;
        s.direction[a] = quarter * TC_HALF_PI;
        s.speed[a] = 0.0f;
        s.acceleration[a] = 0.0f;
        s.in_game[a] = sh.in_game[a] = true;
    }
    if (threadIdx.x == 0) state.t[e] = 0;
}

#if !TC_FULL_OBSERVATION
#define SPLIT TC_SCAN_SPLIT  // lanes that share one observer's search (a power of 2, at most 32)

// Agent a's K nearest others in the game, by (squared distance, id), into ids (-1 for empty slots),
// found by the SPLIT consecutive lanes of one warp: lane `part` scans ids part, part + SPLIT, ...
// into a sorted list in registers (K is a compile-time constant, so after unrolling every index is
// one), then the lanes merge their lists with shuffles. Scanning in id order and moving entries
// only past strictly larger distances keeps ties in id order within a list; the merge breaks ties
// by id. Every lane of the warp must call this (the shuffles); `active` says whether a is real.
__device__ void nearest_others(const TagShared& sh, int a, int part, bool active, int* ids) {
    float best_d2[K];
    int best_id[K];
#pragma unroll
    for (int m = 0; m < K; ++m) {
        best_d2[m] = INFINITY;
        best_id[m] = -1;
    }
    if (active) {
        float xa = sh.x[a], ya = sh.y[a];
#pragma unroll 1
        for (int j = part; j < N; j += SPLIT) {
            if (j == a || !sh.in_game[j]) continue;
            float d2 = squared_distance(sh.x[j] - xa, sh.y[j] - ya);
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
            bool take = other_d2 < d2 || (other_d2 == d2 && (unsigned)other_id < (unsigned)id);
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

#if TC_FULL_OBSERVATION
#define SLOTS (N - 1)
#else
#define SLOTS K
#endif

// Feature c of the agent in slot m of agent a's observation (r: a's row within the chunk).
__device__ __forceinline__ float feature(const EnvState& s, const TagShared& sh, int a, int r, int m, int c) {
    if (!sh.in_game[a]) return 0.0f;
#if TC_FULL_OBSERVATION
    int j = m < a ? m : m + 1;  // every other agent in id order
#else
    int j = sh.observed[r * K + m];
    if (j < 0) return 0.0f;
#endif
    switch (c) {
        case 0: return (sh.x[j] - sh.x[a]) / TC_POSITION_SCALE;
        case 1: return (sh.y[j] - sh.y[a]) / TC_POSITION_SCALE;
        case 2: return (s.speed[j] - s.speed[a]) / TC_SPEED_SCALE;
        case 3: return (s.acceleration[j] - s.acceleration[a]) / TC_SPEED_SCALE;
        case 4: return (s.direction[j] - s.direction[a]) / TC_TWO_PI;
        case 5: return j < G ? 1.0f : 0.0f;
        default: return sh.in_game[j] ? 1.0f : 0.0f;
    }
}

// Observations of this env's agents at step t (the state rows and the staged positions must be
// current and visible to the whole block), a chunk of agents at a time: the block finds the chunk's nearest
// others (SPLIT threads per agent), then writes the chunk's rows one feature at a time: the
// threads of a warp compute the same feature (no divergence over the 7 kinds) of consecutive
// (agent, slot) pairs, whose stores lie 7 floats apart, a few sectors per warp.
__device__ void write_observations(const EnvState& s, TagShared& sh, int t, float* obs) {
    float time = (float)t / (float)TC_EPISODE_LENGTH;
#if TC_FULL_OBSERVATION
    int chunk = blockDim.x;
#else
    int chunk = blockDim.x / SPLIT;
#endif
    for (int first = 0; first < N; first += chunk) {
        int rows = min(chunk, N - first);
#if !TC_FULL_OBSERVATION
        int r = threadIdx.x / SPLIT;
        bool active = r < rows && sh.in_game[first + r];
        nearest_others(sh, first + r, threadIdx.x % SPLIT, active, sh.observed + r * K);
        __syncthreads();
#endif
        float* out = obs + (long long)first * TC_OBS_DIM;
        // Element k is feature c = k / pairs of pair p = k % pairs, tracked incrementally (no
        // division by the run-time pair count).
        int pairs = rows * SLOTS;
        int c = threadIdx.x / pairs, p = threadIdx.x % pairs;
#pragma unroll 1
        while (c < FEATURES) {
            int r = p / SLOTS, m = p - r * SLOTS;
            out[(long long)r * TC_OBS_DIM + m * FEATURES + c] = feature(s, sh, first + r, r, m, c);
            p += blockDim.x;
            while (p >= pairs) {
                p -= pairs;
                ++c;
            }
        }
        for (int r = threadIdx.x; r < rows; r += blockDim.x) {
            out[(long long)r * TC_OBS_DIM + TC_OBS_DIM - 1] = sh.in_game[first + r] ? time : 0.0f;
        }
        __syncthreads();  // the next chunk overwrites sh.observed
    }
}

__device__ void TagContinuous::observe_env(const State& state, Shared& sh, int e, float* obs, bool*) {
    write_observations(env_rows(state, e), sh, state.t[e], obs);
}

// Spec steps 1-6 of env e; rewards and actions are env e's rows.
__device__ void TagContinuous::step_env(const State& state, Shared& sh, int e, const GmeActionRow& actions,
                                        float* rewards, bool& term, bool& trunc) {
    EnvState s = env_rows(state, e);
    // Spec step 1-3: move the agents in the game, their step rewards and edge penalties.
    int now = state.t[e] + 1;
    for (int g = threadIdx.x; g < G; g += blockDim.x) sh.tags[g] = 0;
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
        sh.x[a] = px;
        sh.y[a] = py;
        sh.in_game[a] = playing;
        rewards[a] = reward;
    }
    __syncthreads();

    // Step 4: each runner in the game against its nearest tagger in the game (ties: lowest id).
    int left = 0;
    for (int a = G + threadIdx.x; a < N; a += blockDim.x) {
        if (!sh.in_game[a]) continue;
        float best = INFINITY;
        int nearest = 0;
        for (int j = 0; j < G; ++j) {
            if (!sh.in_game[j]) continue;
            float d2 = squared_distance(sh.x[a] - sh.x[j], sh.y[a] - sh.y[j]);
            if (d2 < best) {
                best = d2;
                nearest = j;
            }
        }
        if (sqrtf(best) < TC_TAGGING_RADIUS) {
            atomicAdd(&sh.tags[nearest], 1);
            rewards[a] = rewards[a] + TC_TAG_PENALTY_FOR_RUNNER;
#if TC_RUNNER_EXITS
            // Only runners' flags change here, and this phase reads only taggers' flags.
            sh.in_game[a] = s.in_game[a] = false;
            s.speed[a] = 0.0f;
            s.acceleration[a] = 0.0f;
#endif
        }
        left += sh.in_game[a];
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
            if (sh.tags[a] > 0) reward = __fadd_rn(reward, __fmul_rn((float)sh.tags[a], TC_TAG_REWARD_FOR_TAGGER));
        } else if (last && sh.in_game[a]) {
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
