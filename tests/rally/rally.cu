// Rally-v0's CUDA C kernels; the rules and the torch reference are in game.py.

#define N GAME_NUM_AGENTS

struct Rally : GmeGame {
    struct Shared {
        float x[N], y[N];  // the positions after the moves
        int gathered;      // agents with every agent near them
    };

    __device__ static void reset_env(const State& s, Shared&, int e, unsigned long long seed, unsigned int episode) {
        for (int a = threadIdx.x; a < N; a += blockDim.x) {
            s.x[(long long)e * N + a] = gme_uniform(seed, episode, 2 * a, -GAME_BOUND, GAME_BOUND);
            s.y[(long long)e * N + a] = gme_uniform(seed, episode, 2 * a + 1, -GAME_BOUND, GAME_BOUND);
        }
        if (threadIdx.x == 0) s.t[e] = 0;
    }

    __device__ static void step_env(const State& s, Shared& sh, int e, const GmeActionRow& actions, float* rewards,
                                    bool& term, bool& trunc) {
        const float moves[3] = GAME_MOVES;  // a tuple constant: a brace list
        float* x = s.x + (long long)e * N;
        float* y = s.y + (long long)e * N;
        if (threadIdx.x == 0) sh.gathered = 0;
        for (int a = threadIdx.x; a < N; a += blockDim.x) {
            const GmeAction* action = actions.agent(a);  // GME_ACTION_SIZE = 2 indices
            sh.x[a] = fminf(fmaxf(x[a] + moves[min(max(action[0], 0LL), 2LL)], -GAME_BOUND), GAME_BOUND);
            sh.y[a] = fminf(fmaxf(y[a] + moves[min(max(action[1], 0LL), 2LL)], -GAME_BOUND), GAME_BOUND);
        }
        __syncthreads();  // every agent has moved; gathered is 0
        for (int a = threadIdx.x; a < N; a += blockDim.x) {
            int count = 0;
            for (int j = 0; j < N; ++j)
                count += fabsf(sh.x[j] - sh.x[a]) <= GAME_RADIUS && fabsf(sh.y[j] - sh.y[a]) <= GAME_RADIUS;
            rewards[a] = (float)count / (float)N;
            if (count == N) atomicAdd(&sh.gathered, 1);
            x[a] = sh.x[a];
            y[a] = sh.y[a];
        }
        __syncthreads();
        int now = s.t[e] + 1;
        term = sh.gathered == N;
        trunc = now >= GAME_EPISODE_LENGTH && !term;
        __syncthreads();  // every thread has read t
        if (threadIdx.x == 0) s.t[e] = now;
    }

    __device__ static void observe_env(const State& s, Shared&, int e, float* obs, bool*) {
        constexpr int dim = 2 + 2 * N;
        const float* x = s.x + (long long)e * N;
        const float* y = s.y + (long long)e * N;
        for (int k = threadIdx.x; k < N * dim; k += blockDim.x) {
            int a = k / dim, f = k % dim, j = (f - 2) / 2;  // j: the agent of feature f >= 2
            float own = f % 2 == 0 ? x[a] : y[a];
            obs[k] = f < 2 ? own : (f % 2 == 0 ? x[j] : y[j]) - own;
        }
    }
};
