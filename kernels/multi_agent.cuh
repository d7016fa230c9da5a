// The fused step + autoreset shared by the multi-agent kernels (twin: multi_agent_numba.py; the torch
// reference of the same runtime: gpu_marl_envs/backends/multi_agent_torch.py). Each env has a team of
// GME_GAME_THREADS threads (its agents spread over them: agent a on lane a % GME_GAME_THREADS), and
// every phase boundary is a barrier of that team alone (gme_sync), so nothing waits across envs. A
// block holds GME_GAMES_PER_BLOCK teams: one by default (the team is the block, gme_sync a
// __syncthreads); a game of few agents may pack several (MultiAgentDefinition.games_per_block), each
// team then a slice of one warp and gme_sync a __syncwarp of its lanes, so that a block of 3-agent games
// keeps most of its threads busy. A game packed so writes gme_lane(), gme_lanes() and gme_sync() where a
// game of one team per block may write threadIdx.x, blockDim.x and __syncthreads().
//
// What this file owns: the two kernels (GME_MULTI_AGENT_KERNELS), the NEXT_STEP reset branch, the
// flags, per-agent returns, the episode totals' write, SAME_STEP's final observations and reset, the
// reset kernel's body, how the step kernel reads the agents' actions (GmeActions: one pointer per
// agent group, no gather beforehand) and where it writes a packed block's observations and rewards
// (GME_STAGED: shared memory first, gme_multi_agent_step). It calls observe_env only right after
// reset_env or step_env of the same env in the same launch (in_game and totals_env between), so a game
// may observe from what those two left in its Shared (SimpleSpread does). A game supplies a struct
// deriving from GmeGame, whose defaults (below) it overrides where it differs:
//   struct Shared;  // what the threads of a team share (static shared memory, one per team)
//   __device__ static void reset_env(const State&, Shared&, int e, unsigned long long seed, unsigned int episode);
//       a fresh state of env e (and whatever it stages in Shared), t included;
//   __device__ static void step_env(const State&, Shared&, int e, const GmeActionRow& actions, float* rewards,
//                                   bool& terminated, bool& truncated);
//       one step of env e from actions (actions.agent(a): agent a's values, its group's width of them (at most
//       action_size), GmeAction each:
//       discrete indices possibly out of range (clamp them), or Box values possibly NaN (read them through
//       gme_nan_to_zero) and outside the bounds (clip them as the rules say)), every agent's reward into
//       rewards (env e's row), t advanced; terminated and truncated must come out the same in every thread;
//   __device__ static bool in_game(const State&, const Shared&, int e, int a);
//   __device__ static void observe_env(const State&, Shared&, int e, float* obs, bool* masks);
//       env e's observations (obs_size floats) and, unless masks is null, action masks (mask_size);
//   __device__ static void totals_env(const State&, Shared&, int e, float* totals);
//       the episode totals of the state right after a step (only games with num_metrics > 0 need it);
//   __device__ static void store_warp(const State&, const Shared* teams, const GmeWarp& warp);
//       where GME_WARP_STORES is 1, the stores of state that the game's step_env left in its teams'
//       Shared instead of writing it (by GmeWarp::store_teams), after every team of the warp has
//       stepped or reset and observed (observe_env must leave what store_warp reads as step_env and
//       reset_env left it); where it is 0 step_env writes the state itself.
//   static constexpr bool speculative_step;
//       true where step_env may run on an env that awaits its NEXT_STEP reset, the reset following it:
//       the step kernel then reads needs_reset[e] beside the step's own loads, not before them (a round
//       trip to memory less on every step's path). A game may declare it where its step_env of such an
//       env (its state as the last step left it, the actions whatever they are) reads nothing out of
//       bounds and writes nothing that its reset_env, by the same lanes, does not then overwrite: the
//       state, what observe_env reads in Shared, the rewards (the framework zeroes them). (SimpleSpread's
//       and speaker-listener's captured steps on an H200: 0.17 to 0.38 µs less at 2,000 games, up to 0.24
//       at 65,536.)
// State is GmeState: a pointer per field of the game's state dataclass, named and ordered as its fields,
// typed as its tensors are (float*, int*, bool*, signed char*, ...), each array batch first (env e's row
// of an (E, N) field starts at e * N). Every thread of the team calls each function, with the team
// synchronised (whatever an earlier phase wrote is visible); they may synchronise the team inside
// (gme_sync), and must not write in one phase what another thread reads in it.
// Python defines, before this file is included (multi_agent_pycuda.kernel_source): GmeState (and
// GME_STATE_PARAMETERS, GME_STATE_ARGUMENTS for the kernels' parameter lists), the
// autoreset codes (GME_AUTORESET_*), RNG constants, the agent groups (GME_NUM_GROUPS, GME_GROUP_BEGINS,
// GME_GROUP_SIZES, GME_NUM_AGENTS, GME_ACTION_SIZE, GME_ACTION_TYPE), the buffers' sizes (GME_OBS_SIZE, GME_MASK_SIZE,
// GME_NUM_METRICS), the launch's shape (GME_GAME_THREADS, GME_GAMES_PER_BLOCK, and their product
// GME_BLOCK_THREADS), whether the step is staged (GME_STAGED) and stores by warp (GME_WARP_STORES), the
// kernels' name (GME_KERNEL_NAME) and the game's constants (<prefix>_<NAME>,
// MultiAgentDefinition.kernel_constants).
#pragma once
#include "nvrtc.cuh"
#include "rng.cuh"

static_assert(GME_BLOCK_THREADS == GME_GAME_THREADS * GME_GAMES_PER_BLOCK, "a block is its games' teams");
static_assert(GME_GAMES_PER_BLOCK == 1 ||
                  (GME_GAME_THREADS <= 32 && (GME_GAME_THREADS & (GME_GAME_THREADS - 1)) == 0),
              "packed teams are power-of-two slices of one warp");

// The calling thread's team (its env's slot in the block), its lane in the team, the team's size.
__device__ __forceinline__ int gme_team() { return GME_GAMES_PER_BLOCK == 1 ? 0 : threadIdx.x / GME_GAME_THREADS; }
__device__ __forceinline__ int gme_lane() {
    return GME_GAMES_PER_BLOCK == 1 ? threadIdx.x : threadIdx.x % GME_GAME_THREADS;
}
__device__ __forceinline__ constexpr int gme_lanes() { return GME_GAME_THREADS; }

// The team's barrier: every thread of the team waits for the others, and what each wrote to shared or
// global memory before it is visible to the team after it. A packed team's lanes are one slice of a
// warp, and __syncwarp (unlike __syncthreads) may be reached by a team alone: the teams of a block
// branch apart (one env resets while another steps). A packed team of one lane has nothing to wait
// for (its own writes are in program order): a __syncwarp of one lane cost SimpleSpread's step a
// MATCH and a convergence check at each barrier (8% of its stall samples under ncu).
__device__ __forceinline__ void gme_sync() {
    if constexpr (GME_GAMES_PER_BLOCK == 1) {
        __syncthreads();
    } else if constexpr (GME_GAME_THREADS > 1) {
        // (% 32: a shift of the discarded branch's width, which nvcc still checks.)
        constexpr unsigned int lanes = GME_GAME_THREADS == 32 ? 0xffffffffu : (1u << GME_GAME_THREADS % 32) - 1u;
        __syncwarp(lanes << (threadIdx.x % 32 / GME_GAME_THREADS * GME_GAME_THREADS));
    }
}

// What a game inherits: the state as the runtime passes it, the runtime's sizes, nothing shared, every
// agent in the game for the whole episode, no episode totals.
struct GmeGame {
    typedef GmeState State;
    struct Shared {};
    static constexpr int num_agents = GME_NUM_AGENTS, obs_size = GME_OBS_SIZE, mask_size = GME_MASK_SIZE,
                         action_size = GME_ACTION_SIZE, num_metrics = GME_NUM_METRICS;
    static constexpr bool speculative_step = false;  // needs_reset[e] read before the step

    template <class S, class Sh>
    __device__ static bool in_game(const S&, const Sh&, int, int) { return true; }
    template <class S, class Sh>
    __device__ static void totals_env(const S&, Sh&, int, float*) {}
    template <class S, class Sh, class W>
    __device__ static void store_warp(const S&, const Sh*, const W&) {}
};

// One component of an agent's action: an index (long long) in a discrete game, a value (float) in a
// game of Box actions.
typedef GME_ACTION_TYPE GmeAction;

// A Box action's component as the rules read it: NaN (which validate_actions=False lets through) as 0,
// as the torch reference reads it. fminf/fmaxf alone would drop or keep a NaN by argument order.
__device__ __forceinline__ float gme_nan_to_zero(float x) { return x != x ? 0.0f : x; }

// The step kernel's actions, one pointer per agent group (consecutive agents, in order): group g's
// actions of env e start at group[g] + e * env_stride[g] (GmeAction elements), its k-th agent's values
// (contiguous) at agent_stride[g] * k from there. step_groups passes the groups' own tensors (a
// narrower group's agents as they lie, agent_stride its width), so no kernel or host copy gathers them
// first (at small batches a step is bound by host time, and a gather launch cost ~5 µs of it); step
// passes its one (num_envs, num_agents, action_size) buffer, a group per column range.
struct GmeActions {
    const GmeAction* group[GME_NUM_GROUPS];
    long long env_stride[GME_NUM_GROUPS];
    long long agent_stride[GME_NUM_GROUPS];
};

// Env e's actions: agent(a) points at agent a's values (action_size of them, or its group's width).
struct GmeActionRow {
    const GmeAction* group[GME_NUM_GROUPS];  // env e's row of each group
    long long agent_stride[GME_NUM_GROUPS];

    // The loops unroll with constant indices, so the pointers stay in registers (an index known only
    // at run time would put the array in local memory).
    __device__ GmeActionRow(const GmeActions& actions, int e) {
#pragma unroll
        for (int g = 0; g < GME_NUM_GROUPS; ++g) {
            group[g] = actions.group[g] + (long long)e * actions.env_stride[g];
            agent_stride[g] = actions.agent_stride[g];
        }
    }
    __device__ const GmeAction* agent(int a) const {
        const int begins[GME_NUM_GROUPS] = GME_GROUP_BEGINS;  // begins[0] is 0
        const GmeAction* values = group[0] + a * agent_stride[0];
#pragma unroll
        for (int g = 1; g < GME_NUM_GROUPS; ++g) {
            if (a >= begins[g]) values = group[g] + (a - begins[g]) * agent_stride[g];
        }
        return values;
    }
};

// A fresh episode of env e: the game's reset, running returns back to 0, the episode counter
// advanced (the RNG draws of the next reset differ). Ends with the team synchronised.
template <class Game>
__device__ __forceinline__ void gme_reset_env(const typename Game::State& s, typename Game::Shared& sh, int e,
                                                float* running_returns, unsigned int* episodes,
                                                const unsigned long long* seeds) {
    unsigned int episode = episodes[e];
    Game::reset_env(s, sh, e, seeds[e], episode);
    for (int a = gme_lane(); a < Game::num_agents; a += gme_lanes()) running_returns[a] = 0.0f;
    gme_sync();  // every thread has read episodes[e]; the fresh state is visible to the team
    if (gme_lane() == 0) episodes[e] = episode + 1;
}

// The rounds of a team's loop over its game's agents (agent a on lane a % lanes, in round a / lanes).
constexpr int GME_AGENT_ROUNDS = (GME_NUM_AGENTS + GME_GAME_THREADS - 1) / GME_GAME_THREADS;
// A staged step's loop over them unrolled (#pragma unroll reads C++ constants, not macros).
constexpr int gme_staged_unroll = GME_STAGED ? GME_AGENT_ROUNDS : 1;
// A step that stores by warp (GME_WARP_STORES, multi_agent_buffers.stores_by_warp) stages its per-agent
// outputs too: it is built only where a lane holds several agents, whose own stores of them would be
// strided (a 32-byte sector for each of their few bytes).
static_assert(!GME_WARP_STORES || (GME_STAGED && GME_AGENT_ROUNDS > 1),
              "a step stores by warp what it stages, where a lane holds several agents");

// Env e's step by its team, or its reset where the previous step ended its episode (the step kernel's
// body up to the observations, which the caller writes next): its rewards into team_rewards, then
// into `rewards`; its running returns and agents' flags into row `out` of running_returns,
// agent_terminated and agent_truncated, and the episode's returns into episode_returns
// (gme_multi_agent_step below says where they point; a staged step reads its running returns from
// `returns`, the global array).
template <class Game>
__device__ __forceinline__ void gme_step_env(
    const typename Game::State& s, typename Game::Shared& sh, int e, const GmeActions& actions,
    float* team_rewards, float* rewards, bool* agent_terminated, bool* agent_truncated, bool* terminated,
    bool* truncated, float* running_returns, float* episode_returns, float* episode_totals,
    float* final_observations, bool* final_observation_mask, bool* needs_reset, unsigned int* episodes,
    const unsigned long long* seeds, int autoreset_mode, long long out, const float* returns) {
    long long row = (long long)e * Game::num_agents;
    // The previous step ended this episode: this step only resets (the actions are ignored).
    auto reset_instead = [&] {
        gme_reset_env<Game>(s, sh, e, running_returns + out, episodes, seeds);
        for (int a = gme_lane(); a < Game::num_agents; a += gme_lanes()) {
            if constexpr (GME_WARP_STORES) {
                team_rewards[a] = 0.0f;
            } else {
                rewards[row + a] = 0.0f;
            }
            agent_terminated[out + a] = false;
            agent_truncated[out + a] = false;
        }
        if (gme_lane() == 0) terminated[e] = truncated[e] = needs_reset[e] = false;
    };
    const bool reset = autoreset_mode == GME_AUTORESET_NEXT_STEP && needs_reset[e];
    if (!Game::speculative_step && reset) {
        reset_instead();
        return;
    }

    bool term, trunc;
    static_assert(Game::num_agents == GME_NUM_AGENTS && Game::action_size == GME_ACTION_SIZE &&
                      Game::obs_size == GME_OBS_SIZE && Game::mask_size == GME_MASK_SIZE &&
                      Game::num_metrics == GME_NUM_METRICS,
                  "a game's sizes are the runtime's (GmeGame's): declare none");
    // A staged step loads its lanes' running returns before the game's step, into registers (its loops
    // unrolled), so that the loads overlap the game's own rather than wait after them.
    float staged_returns[GME_STAGED ? GME_AGENT_ROUNDS : 1];
    if constexpr (GME_STAGED) {
#pragma unroll
        for (int k = 0; k < GME_AGENT_ROUNDS; ++k) {
            int a = gme_lane() + k * gme_lanes();
            if (a < Game::num_agents) staged_returns[k] = returns[row + a];
        }
    }
    Game::step_env(s, sh, e, GmeActionRow(actions, e), team_rewards, term, trunc);
    if (Game::speculative_step && reset) {
        gme_sync();  // the step's writes are done: the reset overwrites them
        reset_instead();
        return;
    }
    bool done = term || trunc;
    gme_sync();  // the stepped state and every reward are visible (and every thread has read needs_reset[e])
#pragma unroll gme_staged_unroll
    for (int k = 0; k < GME_AGENT_ROUNDS; ++k) {
        int a = gme_lane() + k * gme_lanes();
        if (a >= Game::num_agents) break;
        float reward = team_rewards[a];
        if constexpr (GME_STAGED && !GME_WARP_STORES) rewards[row + a] = reward;
        // One float32 addition per step, as the reference's running_returns + rewards.
        float sum = (GME_STAGED ? staged_returns[k] : running_returns[row + a]) + reward;
        if (done) episode_returns[row + a] = sum;
        running_returns[out + a] = done ? 0.0f : sum;
        bool playing = Game::in_game(s, sh, e, a);
        agent_terminated[out + a] = term || !playing;
        agent_truncated[out + a] = trunc && playing;
    }
    if constexpr (Game::num_metrics > 0) {
        if (done) Game::totals_env(s, sh, e, episode_totals + (long long)e * Game::num_metrics);
    }
    if (gme_lane() == 0) {
        terminated[e] = term;
        truncated[e] = trunc;
        if (autoreset_mode == GME_AUTORESET_SAME_STEP) {
            final_observation_mask[e] = done;
        } else {
            needs_reset[e] = done;
        }
    }
    gme_sync();  // in_game and totals_env have read what observe_env may overwrite in Shared
    if (autoreset_mode == GME_AUTORESET_SAME_STEP && done) {
        Game::observe_env(s, sh, e, final_observations + (long long)e * Game::obs_size, nullptr);
        gme_sync();  // the final observations have read the state the reset overwrites
        gme_reset_env<Game>(s, sh, e, running_returns + out, episodes, seeds);
    }
}

// A packed warp's staged stores (GME_STAGED): its teams' rows of an (E, ROW) array, side by side in
// shared memory as in the array (from the warp's first env on), stored a value a lane, consecutive
// lanes on consecutive elements, so that a store instruction writes 128 contiguous bytes. (A team
// storing its own rows writes a few elements of each of the warp's envs per instruction, a 32-byte
// sector each: unstaged, SimpleSpread's observations on one lane a game took 62.6 µs a step at 65,536
// games on an H200, staged 11.4.) A tile whose warp's rows span a multiple of 16 bytes is stored 16
// bytes a lane (store_tile). Built by every lane of the warp's teams of envs below num_envs (the others
// have returned), after each team has staged its rows: the constructor is the warp's barrier.
struct GmeWarp {
    static constexpr int teams =
        32 / GME_GAME_THREADS < GME_GAMES_PER_BLOCK ? 32 / GME_GAME_THREADS : GME_GAMES_PER_BLOCK;
    int first_team, first_env, envs, lanes, lane;

    __device__ GmeWarp(int num_envs) {
        first_team = threadIdx.x / 32 * teams;
        first_env = blockIdx.x * GME_GAMES_PER_BLOCK + first_team;
        envs = min(min(teams, GME_GAMES_PER_BLOCK - first_team), num_envs - first_env);
        lanes = envs * GME_GAME_THREADS;
        lane = threadIdx.x % 32;
        __syncwarp(lanes == 32 ? 0xffffffffu : (1u << lanes) - 1u);  // every team's rows are staged
    }

    // The warp's rows of `rows` from the block's tile (team t's row at tile + t * ROW).
    template <int ROW, class T>
    __device__ __forceinline__ void store_tile(const T* tile, T* rows) const {
        const T* from = tile + first_team * ROW;
        // A whole warp of envs whose rows span a multiple of 16 bytes: 16 bytes a lane, 512 contiguous bytes
        // a store, a quarter of the instructions. The rows then start on 16 bytes in the tile (aligned so,
        // a warp's rows `bytes` after the last's) and in the array where the array does (first_env is a
        // multiple of teams). (Speaker-listener at 2,000 games, a captured step on an H200: 1.42 µs against
        // 1.52 with Discrete actions, 1.40 against 1.45 with Box.)
        constexpr int bytes = teams * ROW * sizeof(T);
        if constexpr (bytes % 16 == 0 && teams * GME_GAME_THREADS == 32) {
            if (envs == teams && reinterpret_cast<unsigned long long>(rows) % 16 == 0) {
                const float4* source = reinterpret_cast<const float4*>(from);
                float4* target = reinterpret_cast<float4*>(rows + (long long)first_env * ROW);
#pragma unroll
                for (int k = 0; k < bytes / 16 / 32; ++k) target[lane + 32 * k] = source[lane + 32 * k];
                constexpr int last = bytes / 16 / 32 * 32;  // where the last, partial round starts
                if (lane < bytes / 16 % 32) target[last + lane] = source[last + lane];
                return;
            }
        }
        store<ROW>(rows, [&](int k) { return from[k]; });
    }

    // The warp's rows of `rows`, element i of team t's row read by value(t, i) (t the team's slot in the
    // block, as gme_team()): a game's rows staged in its teams' Shared.
    template <int ROW, class T, class Value>
    __device__ __forceinline__ void store_teams(T* rows, Value value) const {
        store<ROW>(rows, [&](int k) { return value(first_team + k / ROW, k % ROW); });
    }

  private:
    // The warp's rows of `rows`, their element k (from the warp's first env's) read by value(k).
    template <int ROW, class T, class Value>
    __device__ __forceinline__ void store(T* rows, Value value) const {
        T* to = rows + (long long)first_env * ROW + lane;
        constexpr int full = teams * GME_GAME_THREADS == 32 ? teams * ROW : 0;
        if (full && envs == teams) {
            // A whole warp of envs (all but a grid's last): a constant count of stores, unrolled, at constant
            // offsets from one address. A loop whose count is known only at run time spent ~30
            // instructions a 4 floats on 64-bit addresses (20% of SimpleSpread's stall samples).
#pragma unroll 64
            for (int k = 0; k < full / 32; ++k) to[32 * k] = value(lane + 32 * k);
            if (lane < full % 32) to[full / 32 * 32] = value(lane + full / 32 * 32);
        } else {
            // A grid's last, partial warp: its `lanes` lanes store envs * ROW elements, so each lane stores
            // ceil(ROW / GME_GAME_THREADS) of them whatever `envs` is, a constant count again (unrolled, the
            // loads issued together; the Numba twin's loop of a store at a time cost its step 0.9 µs).
            constexpr int rounds = (ROW + GME_GAME_THREADS - 1) / GME_GAME_THREADS;
#pragma unroll 64
            for (int k = 0; k < rounds; ++k)
                if (ROW % GME_GAME_THREADS == 0 || k < rounds - 1 || lane + k * lanes < envs * ROW)
                    to[k * lanes] = value(lane + k * lanes);
        }
    }
};

// The step kernel's body. Where GME_STAGED is 1 (packed teams of a few agents a lane whose block's
// staged rows fit the shared memory Python allows them: multi_agent_buffers.stages_rows), a team's
// observe_env writes its env's observations into a block's tile in shared memory and its step_env the
// rewards into another, and each warp stores the observations (GmeWarp); else both go straight into
// global memory. A game cannot tell: obs and rewards are float* either way. Where GME_WARP_STORES is 1
// too (a lane holds several agents and the grid is wider than the GPU: multi_agent_buffers.stores_by_warp),
// the warp also stores the rewards and gme_step_env's running returns and agents' flags from tiles of
// their own, and what the game left in its teams' Shared (Game::store_warp).
// (SimpleSpread's step at 65,536 games on an H200: 10.9 µs with the observations staged, 8.9 with
// everything; at 2,048 games, whose 16 blocks leave a warp's latency the step's time, 4.5 against 5.2.)
// A team observes before its warp stores: one barrier for every store, and a game of one lane reads in
// observe_env the values its step_env left in Shared from registers (no barrier between the two).
// (With Box actions at 65,536 games: SimpleSpread 8.30 to 8.37 µs against 8.63, speaker-listener 3.99
// against 4.22.)
template <class Game>
__device__ __forceinline__ void gme_multi_agent_step(
    int num_envs, const typename Game::State& s, const GmeActions& actions, float* observations, bool* action_masks,
    float* rewards, bool* agent_terminated, bool* agent_truncated, bool* terminated, bool* truncated,
    float* running_returns, float* episode_returns, float* episode_totals, float* final_observations,
    bool* final_observation_mask, bool* needs_reset, unsigned int* episodes, const unsigned long long* seeds,
    int autoreset_mode) {
    constexpr int games = GME_GAMES_PER_BLOCK, N = GME_NUM_AGENTS;
    static_assert(!GME_STAGED || games > 1, "a step is staged by packed teams");
    static_assert(!GME_STAGED || sizeof(typename Game::Shared) * games + games * (4 * GME_OBS_SIZE + 10 * N) <=
                                     48 * 1024,
                  "a packed block's Shared and its staged rows exceed the 48 KiB of static shared memory: give the "
                  "game fewer games_per_block or less Shared (multi_agent_buffers.STAGED_BYTES bounds the staged "
                  "rows, STAGED_AGENT_BYTES an agent's)");
    constexpr int tile = GME_WARP_STORES ? games * N : 1;
    __shared__ typename Game::Shared teams[games];
    // (16-byte aligned for GmeWarp::store_tile's vectors.)
    __shared__ __align__(16) float staged[GME_STAGED ? games * GME_OBS_SIZE : 1];
    __shared__ __align__(16) float staged_rewards[GME_STAGED ? games * N : 1];
    __shared__ __align__(16) float staged_returns[tile];
    __shared__ __align__(16) bool staged_terminated[tile];
    __shared__ __align__(16) bool staged_truncated[tile];
    int e = blockIdx.x * games + gme_team();
    if (e >= num_envs) return;
    float* obs = GME_STAGED ? staged + gme_team() * GME_OBS_SIZE : observations + (long long)e * GME_OBS_SIZE;
    float* team_rewards = GME_STAGED ? staged_rewards + gme_team() * N : rewards + (long long)e * N;
    // The row of the running returns' and the flags' arrays that the team writes (the tiles' or the global ones).
    long long out = GME_WARP_STORES ? gme_team() * N : (long long)e * N;
    typename Game::Shared& sh = teams[gme_team()];
    gme_step_env<Game>(s, sh, e, actions, team_rewards, rewards, GME_WARP_STORES ? staged_terminated : agent_terminated,
                       GME_WARP_STORES ? staged_truncated : agent_truncated, terminated, truncated,
                       GME_WARP_STORES ? staged_returns : running_returns, episode_returns, episode_totals,
                       final_observations, final_observation_mask, needs_reset, episodes, seeds, autoreset_mode, out,
                       running_returns);
    Game::observe_env(s, sh, e, obs, Game::mask_size ? action_masks + (long long)e * Game::mask_size : nullptr);
    if constexpr (GME_WARP_STORES) {
        GmeWarp warp(num_envs);
        warp.store_tile<N>(staged_rewards, rewards);
        warp.store_tile<N>(staged_returns, running_returns);
        warp.store_tile<N>(staged_terminated, agent_terminated);
        warp.store_tile<N>(staged_truncated, agent_truncated);
        Game::store_warp(s, teams, warp);
        warp.store_tile<GME_OBS_SIZE>(staged, observations);
    } else if constexpr (GME_STAGED) {
        GmeWarp(num_envs).store_tile<GME_OBS_SIZE>(staged, observations);
    }
}

// Programmatic dependent launch (sm_90 on; gpu_marl_envs/backends/cuda_driver.ProgrammaticLaunches says
// what it gains): the step kernel, launched so, waits here for the grid before it on the stream (the
// previous step, say) to end and its writes to be visible, before any read of global memory. Built
// for an older architecture it is launched in order and waits for nothing.
__device__ __forceinline__ void gme_after_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

template <class Game>
__device__ __forceinline__ void gme_multi_agent_reset(int num_envs, const typename Game::State& s,
                                                      float* observations, bool* action_masks,
                                                      float* running_returns, const bool* reset_mask,
                                                      bool* needs_reset, unsigned int* episodes,
                                                      const unsigned long long* seeds) {
    __shared__ typename Game::Shared teams[GME_GAMES_PER_BLOCK];
    typename Game::Shared& sh = teams[gme_team()];
    int e = blockIdx.x * GME_GAMES_PER_BLOCK + gme_team();
    if (e >= num_envs || !reset_mask[e]) return;
    gme_reset_env<Game>(s, sh, e, running_returns + (long long)e * Game::num_agents, episodes, seeds);
    if (gme_lane() == 0) needs_reset[e] = false;
    Game::observe_env(s, sh, e, observations + (long long)e * Game::obs_size,
                      Game::mask_size ? action_masks + (long long)e * Game::mask_size : nullptr);
}

// The game's two kernels, <GME_KERNEL_NAME>_step and <GME_KERNEL_NAME>_reset, with the runtime's parameter
// lists (multi_agent_buffers.STEP_ARGUMENTS, RESET_ARGUMENTS): the state as a pointer per field
// (GME_STATE_PARAMETERS), gathered into a GmeState (GME_STATE_ARGUMENTS, a brace list of them). A game
// without action masks or episode totals receives null pointers for them. GME_MULTI_AGENT_KERNELS_BOUNDED adds
// __launch_bounds__(GME_BLOCK_THREADS, min_blocks) to the step kernel: min_blocks blocks per SM caps
// its registers. The framework writes GME_MULTI_AGENT_KERNELS(Game) after a game's file unless the file
// writes a macro of this family itself (pycuda_backend.rules_source).
#define GME_MULTI_AGENT_KERNELS(Game) GME_MULTI_AGENT_KERNELS_NAMED(GME_KERNEL_NAME, Game, )
#define GME_MULTI_AGENT_KERNELS_BOUNDED(Game, min_blocks) \
    GME_MULTI_AGENT_KERNELS_NAMED(GME_KERNEL_NAME, Game, __launch_bounds__(GME_BLOCK_THREADS, min_blocks))
#define GME_MULTI_AGENT_KERNELS_NAMED(name, Game, bounds) GME_MULTI_AGENT_KERNELS_(name, Game, bounds)  // name expanded
#define GME_MULTI_AGENT_KERNELS_(name, Game, bounds)                                                            \
    extern "C" __global__ void bounds name##_step(                                                              \
        int num_envs, GME_STATE_PARAMETERS, GmeActions actions, float* observations, bool* action_masks,         \
        float* rewards, bool* agent_terminated, bool* agent_truncated, bool* terminated, bool* truncated,        \
        float* running_returns, float* episode_returns, float* episode_totals, float* final_observations,        \
        bool* final_observation_mask, bool* needs_reset, unsigned int* episodes, const unsigned long long* seeds, \
        int autoreset_mode) {                                                                                   \
        gme_after_previous_grid();                                                                              \
        gme_multi_agent_step<Game>(num_envs, GME_STATE_ARGUMENTS, actions, observations, action_masks, rewards,  \
                                   agent_terminated, agent_truncated, terminated, truncated, running_returns,   \
                                   episode_returns, episode_totals, final_observations, final_observation_mask, \
                                   needs_reset, episodes, seeds, autoreset_mode);                               \
    }                                                                                                           \
    extern "C" __global__ void name##_reset(int num_envs, GME_STATE_PARAMETERS, float* observations,           \
                                            bool* action_masks, float* running_returns, const bool* reset_mask, \
                                            bool* needs_reset, unsigned int* episodes,                          \
                                            const unsigned long long* seeds) {                                  \
        gme_multi_agent_reset<Game>(num_envs, GME_STATE_ARGUMENTS, observations, action_masks, running_returns,  \
                                    reset_mask, needs_reset, episodes, seeds);                                  \
    }
