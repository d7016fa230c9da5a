// Glide-v0's CUDA C kernels (a test game of Box actions); the rules are in game.py.
#include "multi_agent.cuh"

struct Glide : GmeGame {
    __device__ static void reset_env(const State& s, Shared&, int e, unsigned long long seed, unsigned int episode) {
        for (int a = threadIdx.x; a < num_agents; a += blockDim.x) {
            long long i = (long long)e * num_agents + a;
            s.x[i] = gme_uniform(seed, episode, 2 * a, -1.0f, 1.0f);
            s.y[i] = gme_uniform(seed, episode, 2 * a + 1, -1.0f, 1.0f);
            s.vx[i] = s.vy[i] = 0.0f;
        }
        if (threadIdx.x == 0) s.t[e] = 0;
    }

    __device__ static void step_env(const State& s, Shared&, int e, const GmeActionRow& actions, float* rewards,
                                    bool& term, bool& trunc) {
        for (int a = threadIdx.x; a < num_agents; a += blockDim.x) {
            long long i = (long long)e * num_agents + a;
            const GmeAction* push = actions.agent(a);
            float px = fminf(fmaxf(gme_nan_to_zero(push[0]), -1.0f), 1.0f);
            float py = fminf(fmaxf(gme_nan_to_zero(push[1]), -1.0f), 1.0f);
            float vx = __fadd_rn(__fmul_rn(s.vx[i], GAME_DAMPING), __fmul_rn(px, GAME_ACCEL));
            float vy = __fadd_rn(__fmul_rn(s.vy[i], GAME_DAMPING), __fmul_rn(py, GAME_ACCEL));
            float x = s.x[i] + vx, y = s.y[i] + vy;
            s.x[i] = x, s.y[i] = y, s.vx[i] = vx, s.vy[i] = vy;
            rewards[a] = -(fabsf(x) + fabsf(y));
        }
        int now = s.t[e] + 1;
        term = false;
        trunc = now >= GAME_EPISODE_LENGTH;
        __syncthreads();  // every thread has read t
        if (threadIdx.x == 0) s.t[e] = now;
    }

    __device__ static void observe_env(const State& s, Shared&, int e, float* obs, bool*) {
        for (int a = threadIdx.x; a < num_agents; a += blockDim.x) {
            long long i = (long long)e * num_agents + a;
            obs[4 * a] = s.x[i], obs[4 * a + 1] = s.y[i], obs[4 * a + 2] = s.vx[i], obs[4 * a + 3] = s.vy[i];
        }
    }
};

GME_MULTI_AGENT_KERNELS(Glide)
