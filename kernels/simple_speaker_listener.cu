// SimpleSpeakerListener-v4's CUDA C kernels (gpu_marl_envs/envs/simple_speaker_listener.py is the reference
// and documents the rules; kernels/mpe.cuh holds the physics). A game runs on one thread (128 games a
// block: kernels/multi_agent.cuh; simple_speaker_listener.ONE_LANE_AGENTS): its step issues every load at
// once and works in registers (the goal's landmark picked among the loaded ones, not loaded after the
// goal), and leaves what the observations read in Shared, so that observe_env reads no global memory.
#include "mpe.cuh"

#define M GAME_NUM_LANDMARKS
#define C GAME_COMM_DIM

__constant__ float gsl_landmark_colors[3 * M] = GAME_LANDMARK_COLORS;

struct SimpleSpeakerListener : GmeGame {
    static_assert(GME_GAME_THREADS == 1, "a speaker-listener game runs on one lane");
    // Stepped before needs_reset[e] is known (multi_agent.cuh): the step writes the bodies, the utterance,
    // t, the rewards and Shared, each of which a reset rewrites; its goal indexes the loaded landmarks only.
    static constexpr bool speculative_step = true;

    // What observe_env reads, left by reset_env or step_env (the framework calls it only after one of the
    // two in the same launch): the listener's body, the landmarks, the utterance and the goal.
    struct Shared {
        float x, y, vx, vy;
        float landmark_x[M], landmark_y[M], comm[C];
        int goal;
    };

    __device__ static void reset_env(const State& s, Shared& sh, int e, unsigned long long seed, unsigned int episode) {
        for (int a = 0; a < 2; ++a) {
            float x = gme_uniform(seed, episode, a, -1.0f, 1.0f), y = gme_uniform(seed, episode, 2 + a, -1.0f, 1.0f);
            s.x[e * 2 + a] = x;
            s.y[e * 2 + a] = y;
            s.vx[e * 2 + a] = 0.0f;
            s.vy[e * 2 + a] = 0.0f;
            if (a == 1) {
                sh.x = x;
                sh.y = y;
            }
        }
        sh.vx = sh.vy = 0.0f;
        for (int l = 0; l < M; ++l) {
            s.landmark_x[(long long)e * M + l] = sh.landmark_x[l] = gme_uniform(seed, episode, 4 + l, -1.0f, 1.0f);
            s.landmark_y[(long long)e * M + l] = sh.landmark_y[l] = gme_uniform(seed, episode, 4 + M + l, -1.0f, 1.0f);
        }
        s.goal[e] = sh.goal = min((int)floorf(gme_uniform(seed, episode, GAME_GOAL_DRAW, 0.0f, 3.0f)), M - 1);
        for (int k = 0; k < C; ++k) s.comm[(long long)e * C + k] = sh.comm[k] = 0.0f;
        s.t[e] = 0;
    }

    __device__ static void step_env(const State& s, Shared& sh, int e, const GmeActionRow& actions, float* rewards,
                                    bool& term, bool& trunc) {
        // Every load first, into registers: a store to global memory between two of them would make the
        // second wait for the first (the compiler cannot tell that the arrays do not overlap).
        long long i = (long long)e * 2 + 1, row = (long long)e * M;  // the listener's, the landmarks'
        int now = s.t[e] + 1, goal = s.goal[e];
        float x = s.x[i], y = s.y[i], vx = s.vx[i], vy = s.vy[i], lx[M], ly[M], comm[C];
#pragma unroll
        for (int l = 0; l < M; ++l) {
            lx[l] = s.landmark_x[row + l];
            ly[l] = s.landmark_y[row + l];
        }
        const GmeAction* said = actions.agent(0);
        if constexpr (GAME_CONTINUOUS_ACTIONS) {  // the utterance itself, its first C values
#pragma unroll
            for (int k = 0; k < C; ++k) comm[k] = fminf(fmaxf(gme_nan_to_zero((float)said[k]), 0.0f), 1.0f);
        } else {
            long long word = (long long)said[0];
            word = word < 0 ? 0 : (word >= C ? C - 1 : word);
#pragma unroll
            for (int k = 0; k < C; ++k) comm[k] = k == word ? 1.0f : 0.0f;
        }
        float ux, uy;
        mpe_action_force<GAME_CONTINUOUS_ACTIONS>(actions.agent(1), GAME_SENSITIVITY, ux, uy);
        mpe_integrate(x, y, vx, vy, ux, uy, 0.0f);
        // The goal's landmark, picked among the loaded ones (goal is one of 0 .. M - 1).
        float goal_x = lx[0], goal_y = ly[0];
#pragma unroll
        for (int l = 1; l < M; ++l) {
            goal_x = goal == l ? lx[l] : goal_x;
            goal_y = goal == l ? ly[l] : goal_y;
        }
        float reward = -mpe_squared_norm(x - goal_x, y - goal_y);
        s.x[i] = sh.x = x;
        s.y[i] = sh.y = y;
        s.vx[i] = sh.vx = vx;
        s.vy[i] = sh.vy = vy;
#pragma unroll
        for (int l = 0; l < M; ++l) {
            sh.landmark_x[l] = lx[l];
            sh.landmark_y[l] = ly[l];
        }
#pragma unroll
        for (int k = 0; k < C; ++k) s.comm[(long long)e * C + k] = sh.comm[k] = comm[k];
        sh.goal = goal;
        rewards[0] = reward;
        rewards[1] = reward;
        s.t[e] = now;
        term = false;
        trunc = now >= GAME_MAX_CYCLES;
    }

    __device__ static void observe_env(const State&, Shared& sh, int, float* obs, bool*) {
#pragma unroll
        for (int k = 0; k < 3; ++k) obs[k] = gsl_landmark_colors[3 * sh.goal + k];  // the speaker's: the goal's colour
        obs[3] = sh.vx;
        obs[4] = sh.vy;
#pragma unroll
        for (int l = 0; l < M; ++l) {
            obs[5 + 2 * l] = sh.landmark_x[l] - sh.x;
            obs[6 + 2 * l] = sh.landmark_y[l] - sh.y;
        }
#pragma unroll
        for (int k = 0; k < C; ++k) obs[5 + 2 * M + k] = sh.comm[k];
    }
};
