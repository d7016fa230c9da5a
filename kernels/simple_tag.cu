// SimpleTag-v3's CUDA C kernels (gpu_marl_envs/envs/simple_tag.py is the reference and documents the
// rules; kernels/mpe.cuh holds the physics). A team of threads per game (several teams
// per block: kernels/multi_agent.cuh), its agents spread over the team's lanes. Race freedom: the agents' positions are staged in shared memory before a barrier; in the
// move phase a thread reads only the staged positions (and the obstacles, which never move) and writes
// only its own agents' state; the rewards' phase stages the new positions again, the observations' phase
// every body (mpe_stage_bodies, after the barrier that ends the step). The catches of every good agent
// are counted with an integer atomic (exact in any order).
#include "mpe.cuh"

#define N GAME_NUM_AGENTS
#define A GAME_NUM_ADVERSARIES
#define L GAME_NUM_OBSTACLES
#define ADVERSARY_OBS_DIM GAME_ADVERSARY_OBS_DIM
#define GOOD_OBS_DIM GAME_GOOD_OBS_DIM

struct SimpleTag : GmeGame {
    struct Shared {
        // The agents' positions (x, then y; before the move, then after it); for the observations every
        // body (mpe_stage_bodies' layout, which starts with the positions).
        float bodies[4 * N + 2 * L];
        int caught;  // colliding (good agent, adversary) pairs after the move
    };

    __device__ static void reset_env(const State& s, Shared&, int e, unsigned long long seed, unsigned int episode) {
        for (int a = gme_lane(); a < N; a += gme_lanes()) {
            long long i = (long long)e * N + a;
            s.x[i] = gme_uniform(seed, episode, a, -1.0f, 1.0f);
            s.y[i] = gme_uniform(seed, episode, N + a, -1.0f, 1.0f);
            s.vx[i] = 0.0f;
            s.vy[i] = 0.0f;
        }
        constexpr float range = GAME_OBSTACLE_RANGE;
        for (int l = gme_lane(); l < L; l += gme_lanes()) {
            long long i = (long long)e * L + l;
            s.obstacle_x[i] = gme_uniform(seed, episode, 2 * N + l, -range, range);
            s.obstacle_y[i] = gme_uniform(seed, episode, 2 * N + L + l, -range, range);
        }
        if (gme_lane() == 0) s.t[e] = 0;
    }

    // MPE2's boundary penalty of v = |coordinate|.
    __device__ static float bound(float v) {
        if (v < GAME_BOUND_START) return 0.0f;
        if (v < GAME_BOUND_WALL) return __fmul_rn(__fadd_rn(v, -GAME_BOUND_START), GAME_BOUND_SLOPE);
        float arg = __fadd_rn(__fmul_rn(v, 2.0f), -2.0f);
        return arg < GAME_BOUND_EXP_LIMIT ? fminf(mpe_exp(arg), GAME_BOUND_MAX) : GAME_BOUND_MAX;
    }

    __device__ static void step_env(const State& s, Shared& sh, int e, const GmeActionRow& actions, float* rewards,
                                    bool& term, bool& trunc) {
        long long row = (long long)e * N;
        const float* obstacle_x = s.obstacle_x + (long long)e * L;
        const float* obstacle_y = s.obstacle_y + (long long)e * L;
        float *sx = sh.bodies, *sy = sh.bodies + N;
        if (gme_lane() == 0) sh.caught = 0;
        mpe_stage(s.x + row, s.y + row, sx, sy, N);
        for (int a = gme_lane(); a < N; a += gme_lanes()) {
            bool adversary = a < A;
            float fx, fy;
            mpe_action_force<GAME_CONTINUOUS_ACTIONS>(actions.agent(a), adversary ? GAME_ADVERSARY_ACCEL : GAME_GOOD_ACCEL,
                                                      fx, fy);
            for (int j = 0; j < N; ++j) {
                if (j == a) continue;
                bool both = adversary && j < A, neither = !adversary && j >= A;
                float dist_min = both ? GAME_DIST_MIN_AA : neither ? GAME_DIST_MIN_GG : GAME_DIST_MIN_AG;
                float reach2 = both ? GAME_REACH2_AA : neither ? GAME_REACH2_GG : GAME_REACH2_AG;
                mpe_add_contact(sx[a] - sx[j], sy[a] - sy[j], dist_min, reach2, fx, fy);
            }
            for (int l = 0; l < L; ++l) {
                mpe_add_contact(sx[a] - obstacle_x[l], sy[a] - obstacle_y[l],
                                adversary ? GAME_DIST_MIN_AO : GAME_DIST_MIN_GO, adversary ? GAME_REACH2_AO : GAME_REACH2_GO,
                                fx, fy);
            }
            float x = s.x[row + a], y = s.y[row + a], vx = s.vx[row + a], vy = s.vy[row + a];
            mpe_integrate(x, y, vx, vy, fx, fy, adversary ? GAME_ADVERSARY_MAX_SPEED : GAME_GOOD_MAX_SPEED);
            s.x[row + a] = x;
            s.y[row + a] = y;
            s.vx[row + a] = vx;
            s.vy[row + a] = vy;
        }
        gme_sync();  // every agent has moved and read the old positions
        mpe_stage(s.x + row, s.y + row, sx, sy, N);
        for (int g = A + gme_lane(); g < N; g += gme_lanes()) {
            int count = 0;
            for (int a = 0; a < A; ++a) {
                float d2 = mpe_squared_norm(sx[a] - sx[g], sy[a] - sy[g]);
                count += d2 < GAME_REACH2_AG && sqrtf(d2) < GAME_DIST_MIN_AG;
            }
            if (count) atomicAdd(&sh.caught, count);
            float reward = (float)(-GAME_CATCH_REWARD * count);
            reward = __fadd_rn(reward, -bound(fabsf(sx[g])));
            rewards[g] = __fadd_rn(reward, -bound(fabsf(sy[g])));
        }
        gme_sync();  // every catch is counted
        for (int a = gme_lane(); a < A; a += gme_lanes()) rewards[a] = (float)(GAME_CATCH_REWARD * sh.caught);
        int now = s.t[e] + 1;
        term = false;
        trunc = now >= GAME_MAX_CYCLES;
        gme_sync();  // every thread has read t
        if (gme_lane() == 0) s.t[e] = now;
    }

    __device__ static void observe_env(const State& s, Shared& sh, int e, float* obs, bool*) {
        long long row = (long long)e * N;
        mpe_stage_bodies(s.x + row, s.y + row, s.vx + row, s.vy + row, s.obstacle_x + (long long)e * L,
                         s.obstacle_y + (long long)e * L, N, L, sh.bodies);
        constexpr int velocities = 4 + 2 * L + 2 * (N - 1);  // the first of the good agents' velocities
        for (int a = 0; a < N; ++a) {
            bool adversary = a < A;
            float* o = obs + (adversary ? a * ADVERSARY_OBS_DIM : A * ADVERSARY_OBS_DIM + (a - A) * GOOD_OBS_DIM);
            mpe_observe_body(sh.bodies, N, L, a, o);
            // The other good agents' velocities, in id order.
            for (int q = gme_lane(); q < 2 * (adversary ? N - A : N - A - 1); q += gme_lanes()) {
                int g = A + (q >> 1);
                o[velocities + q] = sh.bodies[2 * N + (q & 1) * N + g + (!adversary && g >= a)];
            }
        }
    }
};

// Registers capped so that an SM holds GAME_MIN_BLOCKS blocks (mpe_physics.min_blocks_per_sm says why).
GME_MULTI_AGENT_KERNELS_BOUNDED(SimpleTag, GAME_MIN_BLOCKS)
