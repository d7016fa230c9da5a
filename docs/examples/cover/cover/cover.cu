// Cover-v0's CUDA C kernels; the rules and the torch reference are in game.py. A block per game, its
// agents spread over the block's threads; the count of landmarks covered in shared memory.

#define N GAME_NUM_AGENTS
#define L GAME_GRID_LENGTH

struct Cover : GmeGame {
    struct Shared {
        int covered;
    };

    __device__ static int cell(unsigned long long seed, unsigned int episode, int draw) {
        return min((int)floorf(gme_uniform(seed, episode, draw, 0.0f, (float)(L + 1))), L);
    }

    __device__ static void reset_env(const State& s, Shared&, int e, unsigned long long seed, unsigned int episode) {
        for (int a = threadIdx.x; a < N; a += blockDim.x) {
            long long i = (long long)e * N + a;
            s.x[i] = cell(seed, episode, a);
            s.y[i] = cell(seed, episode, N + a);
            s.landmark_x[i] = cell(seed, episode, 2 * N + a);
            s.landmark_y[i] = cell(seed, episode, 3 * N + a);
        }
        if (threadIdx.x == 0) s.t[e] = 0;
    }

    __device__ static void step_env(const State& s, Shared& sh, int e, const GmeActionRow& actions, float* rewards,
                                    bool& term, bool& trunc) {
        int* x = s.x + (long long)e * N;
        int* y = s.y + (long long)e * N;
        const int* landmark_x = s.landmark_x + (long long)e * N;
        const int* landmark_y = s.landmark_y + (long long)e * N;
        if (threadIdx.x == 0) sh.covered = 0;
        for (int a = threadIdx.x; a < N; a += blockDim.x) {
            long long action = *actions.agent(a);
            x[a] = min(max(x[a] + (action == 1) - (action == 2), 0), L);
            y[a] = min(max(y[a] + (action == 3) - (action == 4), 0), L);
        }
        __syncthreads();  // every agent has moved; covered is 0
        for (int j = threadIdx.x; j < N; j += blockDim.x) {
            bool on = false;
            for (int a = 0; a < N; ++a) on |= x[a] == landmark_x[j] && y[a] == landmark_y[j];
            if (on) atomicAdd(&sh.covered, 1);
        }
        __syncthreads();
        int now = s.t[e] + 1;
        term = sh.covered == N;
        trunc = now >= GAME_EPISODE_LENGTH && !term;
        for (int a = threadIdx.x; a < N; a += blockDim.x) rewards[a] = (float)(sh.covered - N) / (float)N;
        __syncthreads();  // every thread has read t
        if (threadIdx.x == 0) s.t[e] = now;
    }

    __device__ static void observe_env(const State& s, Shared&, int e, float* obs, bool*) {
        constexpr int dim = 2 + 4 * N;
        long long row = (long long)e * N;
        for (int k = threadIdx.x; k < N * dim; k += blockDim.x) {
            // j: the landmark or agent of feature f >= 2, written so that it is an index for f < 2 too
            // (where its load is made and its value unused: (f - 2) / 2 % N is -1 at f = 0)
            int a = k / dim, f = k % dim, j = (f + 2 * N - 2) / 2 % N;
            bool is_x = f % 2 == 0;
            int own = is_x ? s.x[row + a] : s.y[row + a];
            int other = f < 2 + 2 * N ? (is_x ? s.landmark_x[row + j] : s.landmark_y[row + j])
                                      : (is_x ? s.x[row + j] : s.y[row + j]);
            obs[k] = (float)(f < 2 ? own : other - own) / (float)L;
        }
    }
};
