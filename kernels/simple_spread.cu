// SimpleSpread-v3's CUDA C kernels (gpu_marl_envs/envs/simple_spread.py is the reference and documents
// the rules; kernels/mpe.cuh holds the physics). A team of threads per game (several teams
// per block: kernels/multi_agent.cuh), its agents spread over the team's lanes. Race freedom: the agents' positions are staged in shared memory before a barrier; in the
// move phase a thread reads only the staged positions and writes only its own agents' state; the
// rewards' phase stages the new positions again, the observations' phase every body (mpe_stage_bodies,
// after the barrier that ends the step). The landmarks' nearest distances are summed by the team's tree
// (mpe_tree_sum), collision counts are per agent (no atomics).
#include "mpe.cuh"

#define N GAME_NUM_AGENTS
#define OBS_DIM GAME_OBS_DIM

struct SimpleSpread : GmeGame {
    struct Shared {
        // Read by phase: the step's agents' positions (x, then y; before the move, then after it) and,
        // from 2N, each landmark's nearest agent's distance (then the tree sum); the observations'
        // bodies (mpe_stage_bodies' layout, which starts with the positions), over the sums, which
        // the step has read by then. One array, the phases' needs overlapping: about 2,000 agents a game
        // in a block's 48 KB of static shared memory.
        float scratch[6 * N > 2 * N + GAME_SUM_SLOTS ? 6 * N : 2 * N + GAME_SUM_SLOTS];
    };

    __device__ static void reset_env(const State& s, Shared&, int e, unsigned long long seed, unsigned int episode) {
        for (int a = gme_lane(); a < N; a += gme_lanes()) {
            long long i = (long long)e * N + a;
            s.x[i] = gme_uniform(seed, episode, a, -1.0f, 1.0f);
            s.y[i] = gme_uniform(seed, episode, N + a, -1.0f, 1.0f);
            s.vx[i] = 0.0f;
            s.vy[i] = 0.0f;
            s.landmark_x[i] = gme_uniform(seed, episode, 2 * N + a, -1.0f, 1.0f);
            s.landmark_y[i] = gme_uniform(seed, episode, 3 * N + a, -1.0f, 1.0f);
        }
        if (gme_lane() == 0) s.t[e] = 0;
    }

    __device__ static void step_env(const State& s, Shared& sh, int e, const GmeActionRow& actions, float* rewards,
                                    bool& term, bool& trunc) {
        long long row = (long long)e * N;
        float *sx = sh.scratch, *sy = sh.scratch + N, *sums = sh.scratch + 2 * N;
        mpe_stage(s.x + row, s.y + row, sx, sy, N);
        for (int a = gme_lane(); a < N; a += gme_lanes()) {
            float fx, fy;
            mpe_action_force<GAME_CONTINUOUS_ACTIONS>(actions.agent(a), GAME_SENSITIVITY, fx, fy);
            for (int j = 0; j < N; ++j) {
                if (j != a) mpe_add_contact(sx[a] - sx[j], sy[a] - sy[j], GAME_DIST_MIN, GAME_REACH2, fx, fy);
            }
            float x = s.x[row + a], y = s.y[row + a], vx = s.vx[row + a], vy = s.vy[row + a];
            mpe_integrate(x, y, vx, vy, fx, fy, 0.0f);
            s.x[row + a] = x;
            s.y[row + a] = y;
            s.vx[row + a] = vx;
            s.vy[row + a] = vy;
        }
        gme_sync();  // every agent has moved and read the old positions
        mpe_stage(s.x + row, s.y + row, sx, sy, N);
        for (int l = gme_lane(); l < GAME_SUM_SLOTS; l += gme_lanes()) {
            float nearest = 0.0f;
            if (l < N) {
                float lx = s.landmark_x[row + l], ly = s.landmark_y[row + l];
                nearest = mpe_squared_norm(sx[0] - lx, sy[0] - ly);
                for (int a = 1; a < N; ++a) nearest = fminf(nearest, mpe_squared_norm(sx[a] - lx, sy[a] - ly));
                nearest = sqrtf(nearest);
            }
            sums[l] = nearest;
        }
        mpe_tree_sum(sums, GAME_SUM_SLOTS);
        float shared = -sums[0];
        for (int a = gme_lane(); a < N; a += gme_lanes()) {
            int count = 0;
            for (int j = 0; j < N; ++j) {
                float d2 = mpe_squared_norm(sx[j] - sx[a], sy[j] - sy[a]);
                count += j != a && d2 < GAME_REACH2 && sqrtf(d2) < GAME_DIST_MIN;
            }
            rewards[a] = __fadd_rn(__fmul_rn(shared, GAME_GLOBAL_WEIGHT), __fmul_rn(-(float)count, GAME_LOCAL_RATIO));
        }
        int now = s.t[e] + 1;
        term = false;
        trunc = now >= GAME_MAX_CYCLES;
        gme_sync();  // every thread has read t and the tree's sum
        if (gme_lane() == 0) s.t[e] = now;
    }

    __device__ static void observe_env(const State& s, Shared& sh, int e, float* obs, bool*) {
        long long row = (long long)e * N;
        mpe_stage_bodies(s.x + row, s.y + row, s.vx + row, s.vy + row, s.landmark_x + row, s.landmark_y + row, N, N,
                         sh.scratch);
        for (int a = 0; a < N; ++a) {
            float* o = obs + a * OBS_DIM;
            mpe_observe_body(sh.scratch, N, N, a, o);
            // The silent agents' communication.
            for (int q = gme_lane(); q < 2 * (N - 1); q += gme_lanes()) o[4 + 4 * N - 2 + q] = 0.0f;
        }
    }
};
