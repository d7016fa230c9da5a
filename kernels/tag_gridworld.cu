// TagGridworld (gpu_marl_envs/envs/tag_gridworld.py is the reference and documents the rules and
// float32 conventions) on the multi-agent template (multi_agent.cuh: a block per env, agents spread
// over its threads, autoreset, returns): this file is the game's part, struct TagGridworld. The
// params arrive as TG_* constants (kernel_constants in the reference module), the RNG and autoreset
// constants as GME_* (multi_agent_pycuda.kernel_source).
//
// Race freedom: in each phase a thread writes only the agents it handles in that phase; what other
// threads read (the cells after the moves) is staged in shared memory before a barrier. The tag is a block-wide OR
// (__syncthreads_or), the runner's nearest tagger an integer atomicMin over exact keys: both are the
// same in any order. Observations are written by the whole block in consecutive words.

#define N TG_NUM_AGENTS
#define G TG_NUM_TAGGERS
#define R (TG_NUM_AGENTS - 1)  // the runner's id
#define L TG_GRID_LENGTH

// Actions (the reference's STAY, PLUS_X, MINUS_X, PLUS_Y, MINUS_Y).
#define PLUS_X 1
#define MINUS_X 2
#define PLUS_Y 3
#define MINUS_Y 4
#define NUM_ACTIONS 5

// The runner's nearest tagger is the least key (squared distance << ID_BITS) | id: the least
// distance, ties to the lowest id. Cells lie in [0, L] with L < 2^24, so a squared distance is
// below 2^49 and a key below 2^63.
#define ID_BITS 14
#define NO_KEY 0x7FFFFFFFFFFFFFFFLL

static_assert(N <= (1 << ID_BITS), "tagger ids must fit in the low ID_BITS of a nearest-tagger key");
static_assert((long long)N * TG_OBS_DIM <= 0x7FFFFFFFLL, "an env's observation block is indexed by int");

struct TagShared {
    int x[N];  // cells after this step's moves (or after a reset)
    int y[N];
    long long nearest;  // least nearest-tagger key (partial observation only)
};

static_assert(GME_OBS_SIZE == N * TG_OBS_DIM && GME_ACTION_SIZE == 1, "the reference module's layout");

// The game, as multi_agent.cuh calls it: every agent plays until the episode ends (GmeGame's in_game).
struct TagGridworld : GmeGame {
    typedef TagShared Shared;

    __device__ static void reset_env(const State& s, Shared& sh, int e, unsigned long long seed, unsigned int episode);
    __device__ static void step_env(const State& s, Shared& sh, int e, const GmeActionRow& actions, float* rewards,
                                    bool& term, bool& trunc);
    __device__ static void observe_env(const State& s, Shared& sh, int e, float* obs, bool*);
};

__device__ void TagGridworld::reset_env(const State& s, Shared& sh, int e, unsigned long long seed,
                                        unsigned int episode) {
    int* x = s.x + (long long)e * N;
    int* y = s.y + (long long)e * N;
    for (int a = threadIdx.x; a < N; a += blockDim.x) {
#if TG_RANDOM_START
        // Agent a: x from draw 2 a, y from draw 2 a + 1; the min catches a draw rounded up to L + 1.
        int cx = min((int)floorf(gme_uniform(seed, episode, 2 * a, 0.0f, (float)(L + 1))), L);
        int cy = min((int)floorf(gme_uniform(seed, episode, 2 * a + 1, 0.0f, (float)(L + 1))), L);
#else
        int cx = a == R ? 0 : L / 2;
        int cy = cx;
#endif
        x[a] = sh.x[a] = cx;
        y[a] = sh.y[a] = cy;
    }
    if (threadIdx.x == 0) s.t[e] = 0;
}

__device__ __forceinline__ float scaled(int cell) { return (float)cell / (float)L; }

// Observations of env e's agents (the staged cells must be current and visible to the whole block).
__device__ void TagGridworld::observe_env(const State& s, Shared& sh, int e, float* obs, bool*) {
    float time = (float)s.t[e] / (float)TG_EPISODE_LENGTH;
#if TG_FULL_OBSERVATION
    // Row i: [x_j / L (N), y_j / L (N), type_j (N), one-hot(i) (N), t / T].
    for (int k = threadIdx.x; k < N * TG_OBS_DIM; k += blockDim.x) {
        int i = k / TG_OBS_DIM, f = k % TG_OBS_DIM;
        float value;
        if (f < N) {
            value = scaled(sh.x[f]);
        } else if (f < 2 * N) {
            value = scaled(sh.y[f - N]);
        } else if (f < 3 * N) {
            value = f - 2 * N == R ? 1.0f : 0.0f;
        } else if (f < 4 * N) {
            value = f - 3 * N == i ? 1.0f : 0.0f;
        } else {
            value = time;
        }
        obs[k] = value;
    }
#else
    // The runner's target: its nearest tagger by exact integer squared distance (ties: lowest id).
    if (threadIdx.x == 0) sh.nearest = NO_KEY;
    __syncthreads();
    long long best = NO_KEY;
    for (int g = threadIdx.x; g < G; g += blockDim.x) {
        long long dx = (long long)(sh.x[g] - sh.x[R]);
        long long dy = (long long)(sh.y[g] - sh.y[R]);
        long long key = ((dx * dx + dy * dy) << ID_BITS) | g;
        best = min(best, key);
    }
    if (best != NO_KEY) atomicMin(&sh.nearest, best);
    __syncthreads();
    int nearest = (int)(sh.nearest & ((1 << ID_BITS) - 1));
    // Row i: [own x / L, own y / L, target's x / L, target's y / L, own type, t / T].
    for (int k = threadIdx.x; k < N * TG_OBS_DIM; k += blockDim.x) {
        int i = k / TG_OBS_DIM, f = k % TG_OBS_DIM;
        int target = i < G ? R : nearest;
        float value;
        switch (f) {
            case 0: value = scaled(sh.x[i]); break;
            case 1: value = scaled(sh.y[i]); break;
            case 2: value = scaled(sh.x[target]); break;
            case 3: value = scaled(sh.y[target]); break;
            case 4: value = i == R ? 1.0f : 0.0f; break;
            default: value = time; break;
        }
        obs[k] = value;
    }
#endif
}

// Spec steps 1-3 of env e; actions and rewards are env e's rows.
__device__ void TagGridworld::step_env(const State& s, Shared& sh, int e, const GmeActionRow& actions, float* rewards,
                                       bool& term, bool& trunc) {
    // Spec step 1: every agent moves one cell (actions clamped into range), clipped to [0, L]. The
    // reward slot holds the wall-hit penalty to subtract until the tag is known.
    int* ex = s.x + (long long)e * N;
    int* ey = s.y + (long long)e * N;
    int now = s.t[e] + 1;
    for (int a = threadIdx.x; a < N; a += blockDim.x) {
        long long action = min(max(*actions.agent(a), 0LL), (long long)(NUM_ACTIONS - 1));
        int moved_x = ex[a] + (action == PLUS_X) - (action == MINUS_X);
        int moved_y = ey[a] + (action == PLUS_Y) - (action == MINUS_Y);
        int cx = min(max(moved_x, 0), L);
        int cy = min(max(moved_y, 0), L);
        ex[a] = sh.x[a] = cx;
        ey[a] = sh.y[a] = cy;
        rewards[a] = cx != moved_x || cy != moved_y ? TG_WALL_HIT_PENALTY : 0.0f;
    }
    __syncthreads();

    // Step 2: tagged when any tagger stands on the runner's cell after the moves.
    bool on_runner = false;
    for (int g = threadIdx.x; g < G; g += blockDim.x) {
        on_runner |= sh.x[g] == sh.x[R] && sh.y[g] == sh.y[R];
    }
    term = __syncthreads_or(on_runner);

    // Steps 2-3: rewards (tag_term - wall-hit penalty, in float32), episode end.
    trunc = now >= TG_EPISODE_LENGTH && !term;
    for (int a = threadIdx.x; a < N; a += blockDim.x) {
        float tag_term = a == R ? (term ? -TG_TAG_PENALTY_FOR_RUNNER : TG_STEP_COST_FOR_TAGGER)
                                : (term ? TG_TAG_REWARD_FOR_TAGGER : -TG_STEP_COST_FOR_TAGGER);
        rewards[a] = tag_term - rewards[a];
    }
    if (threadIdx.x == 0) s.t[e] = now;
}
