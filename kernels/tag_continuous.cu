// TagContinuous (gpu_marl_envs/envs/tag_continuous.py is the reference and documents the rules and
// float32 conventions): one block per env; agent a is handled by thread a % blockDim.x, so envs with
// more agents than threads loop, and every phase boundary is a __syncthreads of the one block (no
// waiting across blocks). The params arrive as #define TC_* constants (kernel_constants in the
// reference module, TC_BLOCK_THREADS the launch's block size), the RNG and autoreset constants as
// GME_* (multi_agent_pycuda.kernel_source).
//
// Race freedom: in each phase a thread writes only the agents it handles in that phase (runners are
// spread over the threads on their own in the tag phase); what other threads read
// (positions, in-game flags) is staged in shared memory before a barrier; tag counts and the count
// of runners left are integer atomics, exact in any order.
// No fused multiply-adds where the reference rounds twice: __fmul_rn / __fadd_rn.
#include "rng.cuh"

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

__device__ __forceinline__ EnvState env_rows(int e, float* x, float* y, float* direction, float* speed,
                                             float* acceleration, bool* in_game) {
    long long o = (long long)e * N;
    return EnvState{x + o, y + o, direction + o, speed + o, acceleration + o, in_game + o};
}

__device__ __forceinline__ float squared_distance(float dx, float dy) {
    return __fadd_rn(__fmul_rn(dx, dx), __fmul_rn(dy, dy));
}

__device__ void reset_env(const EnvState& s, TagShared& sh, int* t, unsigned int* episodes,
                          unsigned long long seed, int e) {
    unsigned int episode = episodes[e];
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
    __syncthreads();  // every thread has read episodes[e]
    if (threadIdx.x == 0) {
        episodes[e] = episode + 1;
        t[e] = 0;
    }
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

// Observations of this env's agents (the state rows and the staged positions must be current and
// visible to the whole block), a chunk of agents at a time: the block finds the chunk's nearest
// others (SPLIT threads per agent), then writes the chunk's rows one feature at a time: the
// threads of a warp compute the same feature (no divergence over the 7 kinds) of consecutive
// (agent, slot) pairs, whose stores lie 7 floats apart, a few sectors per warp.
__device__ void observe_env(const EnvState& s, TagShared& sh, int t, float* obs) {
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

extern "C" __global__ void tag_continuous_step(
    int num_envs, float* x, float* y, float* direction, float* speed, float* acceleration, bool* in_game, int* t,
    const long long* actions, float* observations, float* rewards, bool* agent_terminated, bool* agent_truncated,
    bool* terminated, bool* truncated, float* running_returns, float* episode_returns, float* final_observations,
    bool* final_observation_mask, bool* needs_reset, unsigned int* episodes, const unsigned long long* seeds,
    int autoreset_mode) {
    __shared__ TagShared sh;
    int e = blockIdx.x;
    if (e >= num_envs) return;
    EnvState s = env_rows(e, x, y, direction, speed, acceleration, in_game);
    long long row = (long long)e * N;
    float* obs = observations + row * TC_OBS_DIM;

    if (autoreset_mode == GME_AUTORESET_NEXT_STEP && needs_reset[e]) {
        // The previous step ended this episode: this step only resets (the actions are ignored).
        reset_env(s, sh, t, episodes, seeds[e], e);
        for (int a = threadIdx.x; a < N; a += blockDim.x) {
            rewards[row + a] = 0.0f;
            running_returns[row + a] = 0.0f;
            agent_terminated[row + a] = false;
            agent_truncated[row + a] = false;
        }
        if (threadIdx.x == 0) {
            terminated[e] = truncated[e] = needs_reset[e] = false;
        }
        __syncthreads();
        observe_env(s, sh, 0, obs);
        return;
    }

    // Spec step 1-3: move the agents in the game, their step rewards and edge penalties.
    int now = t[e] + 1;
    for (int g = threadIdx.x; g < G; g += blockDim.x) sh.tags[g] = 0;
    if (threadIdx.x == 0) sh.runners_left = 0;
    for (int a = threadIdx.x; a < N; a += blockDim.x) {
        bool playing = s.in_game[a];
        float px = s.x[a], py = s.y[a];
        float reward = 0.0f;
        if (playing) {
            const long long* action = actions + (row + a) * 2;
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
        rewards[row + a] = reward;
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
            rewards[row + a] = rewards[row + a] + TC_TAG_PENALTY_FOR_RUNNER;
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
    bool term = sh.runners_left == 0;
    bool last = now == TC_EPISODE_LENGTH;
    bool trunc = last && !term;
    bool done = term || trunc;
    for (int a = threadIdx.x; a < N; a += blockDim.x) {
        float reward = rewards[row + a];
        if (a < G) {
            if (sh.tags[a] > 0) reward = __fadd_rn(reward, __fmul_rn((float)sh.tags[a], TC_TAG_REWARD_FOR_TAGGER));
        } else if (last && sh.in_game[a]) {
            reward = reward + TC_END_OF_GAME_REWARD_FOR_RUNNER;
        }
        rewards[row + a] = reward;
        float sum = running_returns[row + a] + reward;
        if (done) episode_returns[row + a] = sum;
        running_returns[row + a] = done ? 0.0f : sum;
        agent_terminated[row + a] = term || !sh.in_game[a];
        agent_truncated[row + a] = trunc && sh.in_game[a];
    }
    if (threadIdx.x == 0) {
        t[e] = now;
        terminated[e] = term;
        truncated[e] = trunc;
        if (autoreset_mode == GME_AUTORESET_SAME_STEP) {
            final_observation_mask[e] = done;
        } else {
            needs_reset[e] = done;
        }
    }
    if (autoreset_mode == GME_AUTORESET_SAME_STEP && done) {
        observe_env(s, sh, now, final_observations + row * TC_OBS_DIM);
        __syncthreads();  // the final observations have read the state the reset overwrites
        reset_env(s, sh, t, episodes, seeds[e], e);
        __syncthreads();
        observe_env(s, sh, 0, obs);
    } else {
        observe_env(s, sh, now, obs);
    }
}

extern "C" __global__ void tag_continuous_reset(int num_envs, float* x, float* y, float* direction, float* speed,
                                                float* acceleration, bool* in_game, int* t, float* observations,
                                                float* running_returns, const bool* reset_mask, bool* needs_reset,
                                                unsigned int* episodes, const unsigned long long* seeds) {
    __shared__ TagShared sh;
    int e = blockIdx.x;
    if (e >= num_envs || !reset_mask[e]) return;
    EnvState s = env_rows(e, x, y, direction, speed, acceleration, in_game);
    reset_env(s, sh, t, episodes, seeds[e], e);
    for (int a = threadIdx.x; a < N; a += blockDim.x) running_returns[(long long)e * N + a] = 0.0f;
    if (threadIdx.x == 0) needs_reset[e] = false;
    __syncthreads();
    observe_env(s, sh, 0, observations + (long long)e * N * TC_OBS_DIM);
}
