// The fused step + autoreset shared by the single-agent (classic-control) kernels: one thread per
// env, state stored as rows (state[field * num_envs + env]). An env supplies a struct deriving from
// GmeEnv with
//   __device__ static void reset(float* state, int n, int i, unsigned long long seed, unsigned int episode, const Params&);
//   __device__ static void step(float* state, int n, int i, const Action* actions, const Params&, float* reward, bool* terminated);
//   __device__ static void observe(const float* state, int n, int i, float* obs, const Params&);
// and its two extern "C" kernels are declared by GME_CLASSIC_KERNELS(Env), which the framework writes after
// the env's file unless the file does (pycuda_backend.rules_source). Python defines, before this file
// is included (pycuda_backend.kernel_source): Params (GmeParams: EnvDefinition.kernel_params in order,
// each float or int), Action (GmeAction: long long for a Discrete space, float for a Box, whose rows of
// env i start at actions + i * shape), obs_dim (GME_OBS_DIM), the autoreset codes (GME_AUTORESET_*), RNG
// constants, the block size every launch uses (GME_THREADS_PER_BLOCK) and the kernels' name (GME_KERNEL_NAME).
#pragma once
#include "nvrtc.cuh"
#include "rng.cuh"

// What an env inherits: the types and sizes Python defines.
struct GmeEnv {
    typedef GmeParams Params;
    typedef GmeAction Action;
    static const int obs_dim = GME_OBS_DIM;
};

template <class Env>
__device__ __forceinline__ void gme_reset_env(float* state, int n, int i, float* obs, int* elapsed_steps,
                                              bool* needs_reset, unsigned int* episodes,
                                              const unsigned long long* seeds, const typename Env::Params& p) {
    unsigned int episode = episodes[i];
    Env::reset(state, n, i, seeds[i], episode, p);
    episodes[i] = episode + 1;
    Env::observe(state, n, i, obs, p);
    elapsed_steps[i] = 0;
    needs_reset[i] = false;
}

template <class Env>
__device__ __forceinline__ void gme_classic_step(
    int num_envs, float* state, const typename Env::Action* actions, float* observations, float* rewards,
    bool* terminated, bool* truncated, float* final_observations, bool* final_observation_mask,
    int* elapsed_steps, bool* needs_reset, unsigned int* episodes, const unsigned long long* seeds,
    int autoreset_mode, const typename Env::Params& p) {
    // Observations are staged in shared memory and written back by the whole block, so that
    // consecutive threads store consecutive words: a thread writing its own obs_dim-float row
    // would leave every 32-byte sector partly written by each store instruction.
    __shared__ float staged[GME_THREADS_PER_BLOCK * Env::obs_dim];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float* obs = staged + threadIdx.x * Env::obs_dim;

    if (i < num_envs) {
        if (autoreset_mode == GME_AUTORESET_NEXT_STEP && needs_reset[i]) {
            // The previous step ended this episode: this step only resets (the action is ignored).
            gme_reset_env<Env>(state, num_envs, i, obs, elapsed_steps, needs_reset, episodes, seeds, p);
            rewards[i] = 0.0f;
            terminated[i] = false;
            truncated[i] = false;
        } else {
            float reward;
            bool term;
            Env::step(state, num_envs, i, actions, p, &reward, &term);
            int elapsed = elapsed_steps[i] + 1;
            bool trunc = elapsed >= p.max_episode_steps;
            bool done = term || trunc;
            rewards[i] = reward;
            terminated[i] = term;
            truncated[i] = trunc;
            elapsed_steps[i] = elapsed;
            if (autoreset_mode == GME_AUTORESET_SAME_STEP) {
                final_observation_mask[i] = done;
                if (done) {
                    Env::observe(state, num_envs, i, final_observations + (long long)i * Env::obs_dim, p);
                    gme_reset_env<Env>(state, num_envs, i, obs, elapsed_steps, needs_reset, episodes, seeds, p);
                } else {
                    Env::observe(state, num_envs, i, obs, p);
                }
            } else {
                needs_reset[i] = done;
                Env::observe(state, num_envs, i, obs, p);
            }
        }
    }

    __syncthreads();
    int first_env = blockIdx.x * blockDim.x;
    int count = min((int)blockDim.x, num_envs - first_env) * Env::obs_dim;
    float* block_observations = observations + (long long)first_env * Env::obs_dim;
    for (int k = threadIdx.x; k < count; k += blockDim.x) block_observations[k] = staged[k];
}

template <class Env>
__device__ __forceinline__ void gme_classic_reset(int num_envs, float* state, float* observations,
                                                  const bool* reset_mask, int* elapsed_steps, bool* needs_reset,
                                                  unsigned int* episodes, const unsigned long long* seeds,
                                                  const typename Env::Params& p) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= num_envs || !reset_mask[i]) return;
    gme_reset_env<Env>(state, num_envs, i, observations + (long long)i * Env::obs_dim, elapsed_steps, needs_reset,
                       episodes, seeds, p);
}

// The env's two kernels, <GME_KERNEL_NAME>_step and <GME_KERNEL_NAME>_reset, with the runtime's parameter
// lists (buffers.STEP_ARGUMENTS, RESET_ARGUMENTS).
#define GME_CLASSIC_KERNELS(Env) GME_CLASSIC_KERNELS_NAMED(GME_KERNEL_NAME, Env)
#define GME_CLASSIC_KERNELS_NAMED(name, Env) GME_CLASSIC_KERNELS_(name, Env)  // name expanded first
#define GME_CLASSIC_KERNELS_(name, Env)                                                                        \
    extern "C" __global__ void name##_step(                                                                    \
        int num_envs, float* state, const Env::Action* actions, float* observations, float* rewards,           \
        bool* terminated, bool* truncated, float* final_observations, bool* final_observation_mask,            \
        int* elapsed_steps, bool* needs_reset, unsigned int* episodes, const unsigned long long* seeds,        \
        int autoreset_mode, Env::Params params) {                                                              \
        gme_classic_step<Env>(num_envs, state, actions, observations, rewards, terminated, truncated,          \
                              final_observations, final_observation_mask, elapsed_steps, needs_reset,          \
                              episodes, seeds, autoreset_mode, params);                                        \
    }                                                                                                          \
    extern "C" __global__ void name##_reset(int num_envs, float* state, float* observations,                  \
                                            const bool* reset_mask, int* elapsed_steps, bool* needs_reset,     \
                                            unsigned int* episodes, const unsigned long long* seeds,           \
                                            Env::Params params) {                                              \
        gme_classic_reset<Env>(num_envs, state, observations, reset_mask, elapsed_steps, needs_reset,          \
                               episodes, seeds, params);                                                       \
    }
