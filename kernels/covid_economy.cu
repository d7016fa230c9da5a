// CovidEconomy (gpu_marl_envs/envs/covid_economy.py documents the rules, the state layout and the
// float32 conventions this file follows operation by operation; covid_economy_reference.py beside it
// is the torch reference) on the multi-agent template (multi_agent.cuh: a block per env, autoreset,
// returns, episode totals): this file is the game's part, struct CovidEconomy. The params arrive as
// #define CE_* constants (kernel_constants in covid_economy_constants.py: scalars as float literals,
// per-state and per-agent tables as brace lists), the RNG and autoreset constants as GME_*
// (multi_agent_pycuda.kernel_source).
//
// A block of CE_REDUCTION_WIDTH (64) threads per env: state i is stepped by thread i % blockDim.x
// (thread i with 64 threads), the planner by thread S % blockDim.x. Race freedom: in the state phase
// a thread reads and writes only its state's columns (its ring columns included) and reads the
// per-env values (t, the subsidy level) that only the planner phase writes, after barriers; the
// planner's sums over states are a tree reduction in shared memory (CE_REDUCTION_WIDTH slots, zeros
// past S), one level per barrier, in the order of the reference's block_sum, so they are exact twins.
// Every product that meets a sum goes through __fmul_rn / __fadd_rn / __fsub_rn: no fused
// multiply-adds (the reference rounds each operation). The one transcendental pair, log1pf(expf(z))
// in the unemployment's softplus, may differ from torch's by an ulp or so.

#define S CE_NUM_STATES
#define N CE_NUM_AGENTS
#define PLANNER CE_NUM_STATES  // the planner's agent id
#define K CE_NUM_FILTERS
#define L CE_NUM_STRINGENCY_LEVELS
#define Q CE_NUM_SUBSIDY_LEVELS
#define W CE_REDUCTION_WIDTH
#define GOVERNOR_DIM CE_GOVERNOR_OBS_DIM
#define PLANNER_DIM CE_PLANNER_OBS_DIM
#define NUM_FEATURES 9  // per state, in the planner's row: S, I, R, D, V, U over N; P / maxprod; two levels / L
#define NUM_SUMS 4      // per state, summed for the planner: new deaths, production, subsidy, unemployed
#define TAIL (GOVERNOR_DIM - S)  // a governor's row after its one-hot: features, scalars, mask
#define TAIL_STRIDE (TAIL + 1)   // odd, so that thread i's staging writes at 25 i hit distinct banks
#define GOVERNOR_MASK (TAIL - (L + 1))           // the tail's first mask column (action 0)
#define PLANNER_MASK (PLANNER_DIM - (Q + 1))     // the planner row's first mask column

static_assert(S <= W && (W & (W - 1)) == 0, "the reduction needs a power-of-two width of at least S slots");
static_assert(GOVERNOR_DIM == S + 13 + L + 1 && PLANNER_DIM == NUM_FEATURES * S + 4 + Q + 1,
              "the observation layout of the reference module's docstring");

// Tables in global memory (read-only, cached): each thread reads its own state's entry, an access
// pattern that __constant__ memory would serialise.
__device__ const float ce_population[S] = CE_POPULATION;
__device__ const float ce_beta_intercept[S] = CE_BETA_INTERCEPT;
__device__ const float ce_beta_slope[S] = CE_BETA_SLOPE;
__device__ const float ce_vaccines_per_delivery[S] = CE_VACCINES_PER_DELIVERY;
__device__ const float ce_subsidy_per_level[S] = CE_SUBSIDY_PER_LEVEL;
__device__ const float ce_filter_decay[K] = CE_FILTER_DECAY;
__device__ const float ce_filter_drop[K] = CE_FILTER_DROP;
__device__ const float ce_filter_weights[K * S] = CE_FILTER_WEIGHTS;  // (K, S)
__device__ const float ce_unemployment_bias[S] = CE_UNEMPLOYMENT_BIAS;
__device__ const float ce_unemployed_per_percent[S] = CE_UNEMPLOYED_PER_PERCENT;
__device__ const float ce_workers[S] = CE_WORKERS;
__device__ const float ce_max_productivity[S] = CE_MAX_PRODUCTIVITY;
// Per agent, governors then the planner.
__device__ const float ce_economic_norm[N] = CE_ECONOMIC_NORM;
__device__ const float ce_health_scale[N] = CE_HEALTH_SCALE;
__device__ const float ce_min_health[N] = CE_MIN_HEALTH;
__device__ const float ce_health_range[N] = CE_HEALTH_RANGE;
__device__ const float ce_min_economic[N] = CE_MIN_ECONOMIC;
__device__ const float ce_economic_range[N] = CE_ECONOMIC_RANGE;
__device__ const float ce_health_weight[N] = CE_HEALTH_WEIGHT;
__device__ const float ce_economic_weight[N] = CE_ECONOMIC_WEIGHT;
// The starting state of one env (the same for every env and reset).
__device__ const float ce_initial_susceptible[S] = CE_INITIAL_SUSCEPTIBLE;
__device__ const float ce_initial_infected[S] = CE_INITIAL_INFECTED;
__device__ const float ce_initial_recovered[S] = CE_INITIAL_RECOVERED;
__device__ const float ce_initial_vaccinated[S] = CE_INITIAL_VACCINATED;
__device__ const float ce_initial_deaths[S] = CE_INITIAL_DEATHS;
__device__ const float ce_initial_unemployed[S] = CE_INITIAL_UNEMPLOYED;
__device__ const float ce_initial_productivity[S] = CE_INITIAL_PRODUCTIVITY;
__device__ const signed char ce_initial_stringency[CE_BETA_DELAY * S] = CE_INITIAL_STRINGENCY;
__device__ const signed char ce_initial_stringency_changes[CE_FILTER_LENGTH * S] = CE_INITIAL_STRINGENCY_CHANGES;
__device__ const float ce_initial_filter_sums[K * S] = CE_INITIAL_FILTER_SUMS;
__device__ const int ce_initial_cooldown[S] = CE_INITIAL_COOLDOWN;

__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float sub(float a, float b) { return __fsub_rn(a, b); }

struct CovidShared {
    float sums[NUM_SUMS][W];           // per state, then tree-reduced in place: slot 0 holds the sum
    // observe_env stages every observation value but the governors' one-hots here, so that writing
    // the rows costs a shared load per float rather than a decode of its column.
    float governor_tails[S * TAIL_STRIDE];  // governor i's columns S.. at [i * TAIL_STRIDE]
    float planner[PLANNER_DIM];             // the planner's row
};

static_assert(GME_OBS_SIZE == S * GOVERNOR_DIM + PLANNER_DIM && GME_MASK_SIZE == S * (L + 1) + Q + 1 &&
                  GME_ACTION_SIZE == 1 && GME_NUM_METRICS == 4,
              "the reference module's layout");

// The game, as multi_agent.cuh calls it: every agent plays the whole episode (GmeGame's in_game).
struct CovidEconomy : GmeGame {
    typedef CovidShared Shared;

    __device__ static void reset_env(const State& s, Shared& sh, int e, unsigned long long seed, unsigned int episode);
    __device__ static void step_env(const State& s, Shared& sh, int e, const GmeActionRow& actions, float* rewards,
                                    bool& term, bool& trunc);
    __device__ static void observe_env(const State& s, Shared& sh, int e, float* obs, bool* masks);
    __device__ static void totals_env(const State& s, Shared& sh, int e, float* totals);
};

// The starting state: deterministic, so the seed and episode are not used.
__device__ void CovidEconomy::reset_env(const State& s, Shared&, int e, unsigned long long, unsigned int) {
    long long row = (long long)e * S;
    for (int i = threadIdx.x; i < S; i += blockDim.x) {
        s.susceptible[row + i] = ce_initial_susceptible[i];
        s.infected[row + i] = ce_initial_infected[i];
        s.recovered[row + i] = ce_initial_recovered[i];
        s.vaccinated[row + i] = ce_initial_vaccinated[i];
        s.deaths[row + i] = ce_initial_deaths[i];
        s.unemployed[row + i] = ce_initial_unemployed[i];
        s.productivity[row + i] = ce_initial_productivity[i];
        s.cooldown[row + i] = ce_initial_cooldown[i];
        for (int k = 0; k < K; ++k) s.filter_sums[row * K + k * S + i] = ce_initial_filter_sums[k * S + i];
        for (int j = 0; j < CE_BETA_DELAY; ++j) {
            s.stringency[row * CE_BETA_DELAY + j * S + i] = ce_initial_stringency[j * S + i];
        }
        // Consecutive threads store consecutive bytes of each slot.
        for (int j = 0; j < CE_FILTER_LENGTH; ++j) {
            s.stringency_changes[row * CE_FILTER_LENGTH + j * S + i] = ce_initial_stringency_changes[j * S + i];
        }
    }
    if (threadIdx.x == 0) {
        s.subsidy_level[e] = 0;
        s.total_deaths[e] = s.total_unemployed[e] = s.total_subsidy[e] = s.total_productivity[e] = 0.0f;
        s.t[e] = 0;
    }
}

// The daily CRRA utility of an economic index x (the reference's _crra).
__device__ __forceinline__ float crra(float x) {
    float a = fminf(fmaxf(mul(x, CE_DAYS_PER_YEAR), CE_CRRA_CLIP_LOW), CE_CRRA_CLIP_HIGH);
#if CE_CRRA_RECIPROCAL
    float power = 1.0f / a;
#else
    float power = powf(a, CE_CRRA_EXPONENT);
#endif
    return (sub(power, 1.0f) / CE_CRRA_EXPONENT + 1.0f) / CE_DAYS_PER_YEAR;
}

// Agent a's reward from its new deaths and its economic index P (the planner's: sums over states).
__device__ __forceinline__ float reward(int a, float new_deaths, float production) {
    float health = sub(mul(-new_deaths, ce_health_scale[a]), ce_min_health[a]) / ce_health_range[a];
    float economic = sub(crra(production / ce_economic_norm[a]), ce_min_economic[a]) / ce_economic_range[a];
    return add(mul(ce_health_weight[a], health), mul(ce_economic_weight[a], economic));
}

// Spec steps 1-7 of env e; actions and rewards are env e's rows.
__device__ void CovidEconomy::step_env(const State& s, Shared& sh, int e, const GmeActionRow& actions, float* rewards,
                                       bool& term, bool& trunc) {
    // Loads come before the first store: the compiler cannot move a load above a store through a
    // pointer that might alias it, and a block waits out one memory round trip per load issued late.
    long long row = (long long)e * S;
    int before = s.t[e], now = before + 1;
    long long planner_action = *actions.agent(PLANNER);
    int kept_subsidy_level = s.subsidy_level[e];
    // 2. The subsidy level (read by every state; written back by the planner's phase).
    bool decides = (now - 1) % CE_SUBSIDY_INTERVAL == 0;
    int subsidy_level = decides ? (int)min(max(planner_action, 0LL), (long long)Q) : kept_subsidy_level;
    // 3. Vaccines.
    bool delivers = now >= CE_VACCINE_START_DAY && now % CE_VACCINE_DELIVERY_INTERVAL == 0;

    for (int i = threadIdx.x; i < S; i += blockDim.x) {
        long long raw_action = *actions.agent(i);
        float su = s.susceptible[row + i], in = s.infected[row + i], re = s.recovered[row + i];
        float va = s.vaccinated[row + i], old_deaths = s.deaths[row + i];
        int cooldown = s.cooldown[row + i];
        float filter_sums[K];
        for (int k = 0; k < K; ++k) filter_sums[k] = s.filter_sums[row * K + k * S + i];
        signed char* ring = s.stringency + row * CE_BETA_DELAY + i;
        int previous = ring[(before % CE_BETA_DELAY) * S];
        int lagged = ring[(now % CE_BETA_DELAY) * S];  // the level d days back, about to be overwritten
        signed char* changes = s.stringency_changes + row * CE_FILTER_LENGTH + (now % CE_FILTER_LENGTH) * S + i;
        float dropped = (float)*changes;  // the change FILTER_LENGTH days back, about to be overwritten

        // 1. Stringency and cooldown.
        int action = (int)min(max(raw_action, 0LL), (long long)L);
        int level = action != 0 ? action : previous;
        ring[(now % CE_BETA_DELAY) * S] = (signed char)level;
        if (now == cooldown + 1) s.cooldown[row + i] = cooldown + (action != 0 ? CE_ACTION_COOLDOWN : 1);

        float subsidy = mul((float)subsidy_level, ce_subsidy_per_level[i]);
        float available = delivers ? ce_vaccines_per_delivery[i] : 0.0f;

        // 4. Epidemic.
        float beta = add(mul(ce_beta_slope[i], (float)lagged), ce_beta_intercept[i]);
        float fraction = fminf(available / add(su, CE_EPSILON), 1.0f);
        float vaccinated_now = fminf(available, su);
        float infections = mul(mul(mul(su / ce_population[i], in), beta), sub(1.0f, fraction));
        float d_s = sub(-infections, vaccinated_now);
        float d_r = add(mul(CE_RECOVERY_RATE, in), vaccinated_now);
        float d_i = sub(-d_s, d_r);
        float susceptible = fmaxf(add(su, d_s), 0.0f);
        float infected = fmaxf(add(in, d_i), 0.0f);
        float recovered = fmaxf(add(re, d_r), 0.0f);
        float vaccinated = add(va, vaccinated_now);
        float deaths = mul(CE_MORTALITY, sub(recovered, vaccinated));

        // 5. Unemployment: the filters over the last FILTER_LENGTH changes, by their exact recursion.
        int change = level - previous;
        *changes = (signed char)change;
        float signal = 0.0f;
        for (int k = 0; k < K; ++k) {
            float filtered = sub(add(mul(ce_filter_decay[k], filter_sums[k]), (float)change),
                                 mul(ce_filter_drop[k], dropped));
            s.filter_sums[row * K + k * S + i] = filtered;
            float weighted = mul(ce_filter_weights[k * S + i], filtered);
            signal = k == 0 ? weighted : add(signal, weighted);
        }
        float excess = signal > CE_SOFTPLUS_THRESHOLD ? signal : log1pf(expf(signal));
        float unemployed = mul(add(excess, ce_unemployment_bias[i]), ce_unemployed_per_percent[i]);

        // 6. Economy.
        float cant_work = add(mul(add(mul(CE_TOO_SICK_TO_WORK_RATE, infected), deaths), CE_WORKING_AGE_SHARE),
                              unemployed);
        float productivity = add(mul(fmaxf(sub(ce_workers[i], cant_work), 0.0f), CE_PRODUCTION_PER_WORKER), subsidy);

        // 7. The governor's reward; its values for the planner's sums.
        float new_deaths = sub(deaths, old_deaths);
        rewards[i] = reward(i, new_deaths, productivity);
        s.susceptible[row + i] = susceptible;
        s.infected[row + i] = infected;
        s.recovered[row + i] = recovered;
        s.vaccinated[row + i] = vaccinated;
        s.deaths[row + i] = deaths;
        s.unemployed[row + i] = unemployed;
        s.productivity[row + i] = productivity;
        sh.sums[0][i] = new_deaths;
        sh.sums[1][i] = productivity;
        sh.sums[2][i] = subsidy;
        sh.sums[3][i] = unemployed;
    }
    for (int j = S + threadIdx.x; j < W; j += blockDim.x) {
        for (int q = 0; q < NUM_SUMS; ++q) sh.sums[q][j] = 0.0f;
    }
    __syncthreads();
    // The reference's block_sum: slot j += slot j + w, w = W/2 .. 1, one level per barrier.
    for (int w = W / 2; w >= 1; w /= 2) {
        for (int j = threadIdx.x; j < w; j += blockDim.x) {
            for (int q = 0; q < NUM_SUMS; ++q) sh.sums[q][j] = add(sh.sums[q][j], sh.sums[q][j + w]);
        }
        __syncthreads();
    }

    // 7. The planner: the social welfare; the episode's accumulators; the per-env values.
    if (threadIdx.x == PLANNER % blockDim.x) {
        float total_deaths = s.total_deaths[e], total_unemployed = s.total_unemployed[e];  // loads first
        float total_subsidy = s.total_subsidy[e], total_productivity = s.total_productivity[e];
        float new_deaths = sh.sums[0][0], production = sh.sums[1][0], subsidy = sh.sums[2][0];
        rewards[PLANNER] = reward(PLANNER, new_deaths, sub(production, mul(CE_SUBSIDY_COST, subsidy)));
        s.total_deaths[e] = add(total_deaths, new_deaths);
        s.total_unemployed[e] = add(total_unemployed, sh.sums[3][0]);
        s.total_subsidy[e] = add(total_subsidy, subsidy);
        s.total_productivity[e] = add(total_productivity, production);
        s.subsidy_level[e] = subsidy_level;
        s.t[e] = now;
    }
    term = false;
    trunc = now >= CE_EPISODE_LENGTH;
}

__device__ void CovidEconomy::observe_env(const State& s, Shared& sh, int e, float* obs, bool* masks) {
    long long row = (long long)e * S;
    int t = s.t[e];
    float time = (float)t / (float)CE_EPISODE_LENGTH;
    float subsidy_timer = (float)(CE_SUBSIDY_INTERVAL - t % CE_SUBSIDY_INTERVAL) / (float)CE_SUBSIDY_INTERVAL;
    float subsidy_level = (float)s.subsidy_level[e] / (float)Q;
    int next = t + 1;
    float vaccines_next = next >= CE_VACCINE_START_DAY && next % CE_VACCINE_DELIVERY_INTERVAL == 0 ? 1.0f : 0.0f;
    // Staging (layout in the reference's docstring): a thread per state fills its governor's tail
    // and its column of the planner's feature-major block.
    for (int i = threadIdx.x; i < S; i += blockDim.x) {
        float population = ce_population[i];
        const signed char* ring = s.stringency + row * CE_BETA_DELAY + i;
        float features[NUM_FEATURES] = {
            s.susceptible[row + i] / population,
            s.infected[row + i] / population,
            s.recovered[row + i] / population,
            s.deaths[row + i] / population,
            s.vaccinated[row + i] / population,
            s.unemployed[row + i] / population,
            s.productivity[row + i] / ce_max_productivity[i],
            (float)ring[((t + 1) % CE_BETA_DELAY) * S] / (float)L,  // the level that sets beta next
            (float)ring[(t % CE_BETA_DELAY) * S] / (float)L,
        };
        float* tail = sh.governor_tails + i * TAIL_STRIDE;
        for (int f = 0; f < 8; ++f) tail[f] = features[f];
        tail[8] = time;
        tail[9] = features[8];
        tail[10] = subsidy_timer;
        tail[11] = subsidy_level;
        tail[12] = vaccines_next;
        tail[GOVERNOR_MASK] = 1.0f;  // action 0 is always allowed
        float free = t >= s.cooldown[row + i] ? 1.0f : 0.0f;
        for (int a = 1; a <= L; ++a) tail[GOVERNOR_MASK + a] = free;
        for (int f = 0; f < NUM_FEATURES; ++f) sh.planner[f * S + i] = features[f];
    }
    float planner_free = t % CE_SUBSIDY_INTERVAL == 0 ? 1.0f : 0.0f;
    for (int j = threadIdx.x; j < PLANNER_DIM - NUM_FEATURES * S; j += blockDim.x) {
        float scalars[4] = {time, subsidy_timer, subsidy_level, vaccines_next};
        sh.planner[NUM_FEATURES * S + j] = j < 4 ? scalars[j] : j == 4 ? 1.0f : planner_free;
    }
    __syncthreads();

    // The rows, consecutive threads storing consecutive floats. (i, c): float k's governor and
    // column, advanced by blockDim.x floats per iteration without a division.
    int i = threadIdx.x / GOVERNOR_DIM, c = threadIdx.x % GOVERNOR_DIM;
    int rows_per_step = blockDim.x / GOVERNOR_DIM, columns_per_step = blockDim.x % GOVERNOR_DIM;
    for (int k = threadIdx.x; k < S * GOVERNOR_DIM; k += blockDim.x) {
        obs[k] = c < S ? (c == i ? 1.0f : 0.0f) : sh.governor_tails[i * TAIL_STRIDE + c - S];
        i += rows_per_step;
        c += columns_per_step;
        if (c >= GOVERNOR_DIM) {
            c -= GOVERNOR_DIM;
            ++i;
        }
    }
    for (int j = threadIdx.x; j < PLANNER_DIM; j += blockDim.x) obs[S * GOVERNOR_DIM + j] = sh.planner[j];
    if (masks) {  // the mask columns of the rows, as bools
        int a = threadIdx.x % (L + 1);
        i = threadIdx.x / (L + 1);
        rows_per_step = blockDim.x / (L + 1);
        columns_per_step = blockDim.x % (L + 1);
        for (int k = threadIdx.x; k < S * (L + 1); k += blockDim.x) {
            masks[k] = sh.governor_tails[i * TAIL_STRIDE + GOVERNOR_MASK + a] != 0.0f;
            i += rows_per_step;
            a += columns_per_step;
            if (a > L) {
                a -= L + 1;
                ++i;
            }
        }
        for (int j = threadIdx.x; j <= Q; j += blockDim.x) {
            masks[S * (L + 1) + j] = sh.planner[PLANNER_MASK + j] != 0.0f;
        }
    }
}

// The episode's totals (the reference's episode_totals): unemployment as a mean over the days stepped.
__device__ void CovidEconomy::totals_env(const State& s, Shared&, int e, float* totals) {
    if (threadIdx.x != 0) return;
    totals[0] = s.total_deaths[e];
    totals[1] = s.total_unemployed[e] / (float)max(s.t[e], 1);
    totals[2] = s.total_subsidy[e];
    totals[3] = s.total_productivity[e];
}
