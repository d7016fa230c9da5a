// SimpleSpread-v3's CUDA C kernels (gpu_marl_envs/envs/simple_spread.py is the reference and documents
// the rules; kernels/mpe.cuh holds the physics). A game of up to simple_spread.ONE_LANE_AGENTS agents
// runs on one thread (128 games a block: kernels/multi_agent.cuh), its whole step in registers
// (step_alone). A larger game has a team of threads (several teams a block up to 32 lanes), its
// agents spread over the team's lanes (step_team): a step stages the game's bodies in shared memory
// once (one round trip to global memory for the whole state, the actions' loads issued before it)
// and works from there. Race freedom: in the move phase a thread reads the staged old positions and
// writes only its own agents' velocities; the new positions wait in registers for a barrier before
// they are staged. The landmarks' nearest distances are summed by the team's tree (mpe_tree_sum),
// collision counts are per agent (no atomics). Either way the observations read the bodies the step
// left in Shared.
#include "mpe.cuh"

#define N GAME_NUM_AGENTS
#define OBS_DIM GAME_OBS_DIM

struct SimpleSpread : GmeGame {
    // Stepped before needs_reset[e] is known (multi_agent.cuh): the step writes the agents' bodies, t and
    // the rewards, each of which a reset rewrites by the same lanes, and reads only the game's rows.
    static constexpr bool speculative_step = true;
    struct Shared {
        // The game's bodies in mpe_stage_bodies' layout (the agents' x, y, vx, vy, then the landmarks' x, y),
        // staged by step_env (then moved) and written by reset_env: observe_env reads them, as the framework
        // calls it only after one of the two in the same launch (multi_agent.cuh). Then each landmark's
        // nearest agent's distance, and their tree sum. About 1,700 agents a game fit a block's 48 KB of
        // static shared memory.
        float bodies[6 * N];
        float sums[GAME_SUM_SLOTS];
    };

    __device__ static void reset_env(const State& s, Shared& sh, int e, unsigned long long seed,
                                     unsigned int episode) {
        for (int a = gme_lane(); a < N; a += gme_lanes()) {
            long long i = (long long)e * N + a;
            float x = gme_uniform(seed, episode, a, -1.0f, 1.0f), y = gme_uniform(seed, episode, N + a, -1.0f, 1.0f);
            float lx = gme_uniform(seed, episode, 2 * N + a, -1.0f, 1.0f);
            float ly = gme_uniform(seed, episode, 3 * N + a, -1.0f, 1.0f);
            s.x[i] = sh.bodies[a] = x;
            s.y[i] = sh.bodies[N + a] = y;
            s.vx[i] = sh.bodies[2 * N + a] = 0.0f;
            s.vy[i] = sh.bodies[3 * N + a] = 0.0f;
            s.landmark_x[i] = sh.bodies[4 * N + a] = lx;
            s.landmark_y[i] = sh.bodies[5 * N + a] = ly;
        }
        if (gme_lane() == 0) s.t[e] = 0;
    }

    __device__ static void step_env(const State& s, Shared& sh, int e, const GmeActionRow& actions, float* rewards,
                                    bool& term, bool& trunc) {
        int now = ALONE ? step_alone(s, sh, e, actions, rewards) : step_team(s, sh, e, actions, rewards);
        term = false;
        trunc = now >= GAME_MAX_CYCLES;
    }

    // A game of up to simple_spread.ONE_LANE_AGENTS agents on one thread: the whole step in registers, its
    // loads issued together, each contact pair and each collision pair computed once (mpe_add_contacts; a
    // squared distance is the same either way round). The bodies it leaves go to Shared for observe_env.
    // The additions keep the team's order below: an agent's forces by the other agent's id, the
    // landmarks' distances by mpe_tree_sum's tree. (The step staged through Shared, with a barrier
    // between phases, ran 2.97 M instructions at 65,536 games under ncu; this one, with multi_agent.cuh's
    // barrier and store for it, 1.85 M.)
    static constexpr bool ALONE = GME_GAME_THREADS == 1;
    // The register arrays' lengths (1 in a team's build, which compiles step_alone without calling it).
    static constexpr int ALONE_N = ALONE ? N : 1, ALONE_SLOTS = ALONE ? GAME_SUM_SLOTS : 1;

    // Both return the step's t.
    __device__ static int step_alone(const State& s, Shared& sh, int e, const GmeActionRow& actions, float* rewards) {
        long long row = (long long)e * N;
        float fx[ALONE_N], fy[ALONE_N], x[ALONE_N], y[ALONE_N], vx[ALONE_N], vy[ALONE_N], lx[ALONE_N], ly[ALONE_N];
        int now = s.t[e] + 1;
#pragma unroll
        for (int a = 0; a < ALONE_N; ++a) {
            mpe_action_force<GAME_CONTINUOUS_ACTIONS>(actions.agent(a), GAME_SENSITIVITY, fx[a], fy[a]);
            x[a] = s.x[row + a];
            y[a] = s.y[row + a];
            vx[a] = s.vx[row + a];
            vy[a] = s.vy[row + a];
            lx[a] = s.landmark_x[row + a];
            ly[a] = s.landmark_y[row + a];
        }
        mpe_add_contacts(x, y, GAME_DIST_MIN, GAME_REACH2, fx, fy);
#pragma unroll
        for (int a = 0; a < ALONE_N; ++a) {
            mpe_integrate(x[a], y[a], vx[a], vy[a], fx[a], fy[a], 0.0f);
            if constexpr (!GME_WARP_STORES) {
                s.x[row + a] = x[a];
                s.y[row + a] = y[a];
                s.vx[row + a] = vx[a];
                s.vy[row + a] = vy[a];
            }
            sh.bodies[a] = x[a];
            sh.bodies[N + a] = y[a];
            sh.bodies[2 * N + a] = vx[a];
            sh.bodies[3 * N + a] = vy[a];
            sh.bodies[4 * N + a] = lx[a];
            sh.bodies[5 * N + a] = ly[a];
        }
        float sums[ALONE_SLOTS];
#pragma unroll
        for (int l = 0; l < ALONE_SLOTS; ++l) {
            sums[l] = 0.0f;
            if (l < ALONE_N) {
                float nearest = mpe_squared_norm(x[0] - lx[l], y[0] - ly[l]);
#pragma unroll
                for (int a = 1; a < ALONE_N; ++a) nearest = fminf(nearest, mpe_squared_norm(x[a] - lx[l], y[a] - ly[l]));
                sums[l] = sqrtf(nearest);
            }
        }
#pragma unroll
        for (int h = ALONE_SLOTS / 2; h > 0; h /= 2) {
#pragma unroll
            for (int k = 0; k < h; ++k) sums[k] = __fadd_rn(sums[k], sums[k + h]);
        }
        int count[ALONE_N] = {};
#pragma unroll
        for (int a = 0; a < ALONE_N; ++a) {
#pragma unroll
            for (int j = a + 1; j < ALONE_N; ++j) {
                // sqrtf(d2) < DIST_MIN exactly where d2 < COLLIDE_D2 (mpe_physics.below_sqrt).
                int hit = mpe_squared_norm(x[j] - x[a], y[j] - y[a]) < GAME_COLLIDE_D2;
                count[a] += hit;
                count[j] += hit;
            }
        }
#pragma unroll
        for (int a = 0; a < ALONE_N; ++a) rewards[a] = reward(-sums[0], count[a]);
        s.t[e] = now;
        return now;
    }

    // A team's step: the game's bodies staged in Shared once (after the actions' loads are issued), a
    // lane's agents moved from there; the landmarks' distances summed by the team's tree.
    __device__ static int step_team(const State& s, Shared& sh, int e, const GmeActionRow& actions, float* rewards) {
        long long row = (long long)e * N;
        float *px = sh.bodies, *py = px + N, *pvx = px + 2 * N, *pvy = px + 3 * N, *lx = px + 4 * N, *ly = px + 5 * N;
        int now = s.t[e] + 1;
        // The lane's agents' action forces (round k: agent lane + k lanes), loaded before the staging so that
        // the loads share its round trip; the loops unroll, so the arrays stay in registers.
        float fx[GME_AGENT_ROUNDS], fy[GME_AGENT_ROUNDS], nx[GME_AGENT_ROUNDS], ny[GME_AGENT_ROUNDS];
#pragma unroll
        for (int k = 0; k < GME_AGENT_ROUNDS; ++k) {
            int a = gme_lane() + k * gme_lanes();
            if (a < N) mpe_action_force<GAME_CONTINUOUS_ACTIONS>(actions.agent(a), GAME_SENSITIVITY, fx[k], fy[k]);
        }
        mpe_stage_bodies(s.x + row, s.y + row, s.vx + row, s.vy + row, s.landmark_x + row, s.landmark_y + row, N, N,
                         sh.bodies);
#pragma unroll
        for (int k = 0; k < GME_AGENT_ROUNDS; ++k) {
            int a = gme_lane() + k * gme_lanes();
            if (a >= N) break;
            for (int j = 0; j < N; ++j) {
                if (j != a) mpe_add_contact(px[a] - px[j], py[a] - py[j], GAME_DIST_MIN, GAME_REACH2, fx[k], fy[k]);
            }
        }
#pragma unroll
        for (int k = 0; k < GME_AGENT_ROUNDS; ++k) {
            int a = gme_lane() + k * gme_lanes();
            if (a >= N) break;
            float x = px[a], y = py[a], vx = pvx[a], vy = pvy[a];
            mpe_integrate(x, y, vx, vy, fx[k], fy[k], 0.0f);
            if constexpr (!GME_WARP_STORES) {
                s.x[row + a] = x;
                s.y[row + a] = y;
                s.vx[row + a] = vx;
                s.vy[row + a] = vy;
            }
            nx[k] = x;
            ny[k] = y;
            pvx[a] = vx;
            pvy[a] = vy;
        }
        gme_sync();  // every agent has read the old positions
#pragma unroll
        for (int k = 0; k < GME_AGENT_ROUNDS; ++k) {
            int a = gme_lane() + k * gme_lanes();
            if (a >= N) break;
            px[a] = nx[k];
            py[a] = ny[k];
        }
        gme_sync();  // the new positions are staged
        for (int l = gme_lane(); l < GAME_SUM_SLOTS; l += gme_lanes()) {
            float nearest = 0.0f;
            if (l < N) {
                nearest = mpe_squared_norm(px[0] - lx[l], py[0] - ly[l]);
                for (int a = 1; a < N; ++a) nearest = fminf(nearest, mpe_squared_norm(px[a] - lx[l], py[a] - ly[l]));
                nearest = sqrtf(nearest);
            }
            sh.sums[l] = nearest;
        }
        mpe_tree_sum(sh.sums, GAME_SUM_SLOTS);
        float shared = -sh.sums[0];
        for (int a = gme_lane(); a < N; a += gme_lanes()) {
            int count = 0;
            for (int j = 0; j < N; ++j) {
                // sqrtf(d2) < DIST_MIN exactly where d2 < COLLIDE_D2 (mpe_physics.below_sqrt).
                count += j != a && mpe_squared_norm(px[j] - px[a], py[j] - py[a]) < GAME_COLLIDE_D2;
            }
            rewards[a] = reward(shared, count);
        }
        if (gme_lane() == 0) s.t[e] = now;  // every thread read t before the staging's barrier
        return now;
    }

    // Where the warp stores (GME_WARP_STORES), the step leaves the moved bodies in Shared only (as a
    // reset leaves them too), and the warp stores each field's rows, a float a lane, 128 contiguous
    // bytes a store (written by a game's one lane, its rows took a 32-byte sector for every 12 bytes).
    __device__ static void store_warp(const State& s, const Shared* teams, const GmeWarp& warp) {
        float* const fields[4] = {s.x, s.y, s.vx, s.vy};
#pragma unroll
        for (int f = 0; f < 4; ++f) {
            warp.store_teams<N>(fields[f], [&](int t, int a) { return teams[t].bodies[f * N + a]; });
        }
    }

    // An agent's reward from the negated sum of the landmarks' distances and its collisions.
    __device__ static float reward(float shared, int count) {
        return __fadd_rn(__fmul_rn(shared, GAME_GLOBAL_WEIGHT), __fmul_rn(-(float)count, GAME_LOCAL_RATIO));
    }

    __device__ static void observe_env(const State&, Shared& sh, int, float* obs, bool*) {
        for (int a = 0; a < N; ++a) {
            float* o = obs + a * OBS_DIM;
            mpe_observe_body(sh.bodies, N, N, a, o);
            // The silent agents' communication.
            for (int q = gme_lane(); q < 2 * (N - 1); q += gme_lanes()) o[4 + 4 * N - 2 + q] = 0.0f;
        }
    }
};
