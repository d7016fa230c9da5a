// SimpleSpeakerListener-v4's CUDA C kernels (gpu_marl_envs/envs/simple_speaker_listener.py is the
// reference and documents the rules; kernels/mpe.cuh holds the physics). A team of threads per game
// of two agents (several teams per block: kernels/multi_agent.cuh): lane 0 steps the game (the speaker's
// word, the listener's move, the shared reward), the team's lanes write the observations after it.
#include "mpe.cuh"

#define M GAME_NUM_LANDMARKS
#define C GAME_COMM_DIM

__constant__ float gsl_landmark_colors[3 * M] = GAME_LANDMARK_COLORS;

struct SimpleSpeakerListener : GmeGame {
    __device__ static void reset_env(const State& s, Shared&, int e, unsigned long long seed, unsigned int episode) {
        if (gme_lane() != 0) return;
        for (int a = 0; a < 2; ++a) {
            s.x[e * 2 + a] = gme_uniform(seed, episode, a, -1.0f, 1.0f);
            s.y[e * 2 + a] = gme_uniform(seed, episode, 2 + a, -1.0f, 1.0f);
            s.vx[e * 2 + a] = 0.0f;
            s.vy[e * 2 + a] = 0.0f;
        }
        for (int l = 0; l < M; ++l) {
            s.landmark_x[(long long)e * M + l] = gme_uniform(seed, episode, 4 + l, -1.0f, 1.0f);
            s.landmark_y[(long long)e * M + l] = gme_uniform(seed, episode, 4 + M + l, -1.0f, 1.0f);
        }
        s.goal[e] = min((int)floorf(gme_uniform(seed, episode, GAME_GOAL_DRAW, 0.0f, 3.0f)), M - 1);
        for (int k = 0; k < C; ++k) s.comm[(long long)e * C + k] = 0.0f;
        s.t[e] = 0;
    }

    __device__ static void step_env(const State& s, Shared&, int e, const GmeActionRow& actions, float* rewards,
                                    bool& term, bool& trunc) {
        int now = s.t[e] + 1;
        term = false;
        trunc = now >= GAME_MAX_CYCLES;
        gme_sync();  // every thread has read t
        if (gme_lane() != 0) return;
        const GmeAction* said = actions.agent(0);
        if constexpr (GAME_CONTINUOUS_ACTIONS) {  // the utterance itself, its first C values
            for (int k = 0; k < C; ++k)
                s.comm[(long long)e * C + k] = fminf(fmaxf(gme_nan_to_zero((float)said[k]), 0.0f), 1.0f);
        } else {
            long long word = (long long)said[0];
            word = word < 0 ? 0 : (word >= C ? C - 1 : word);
            for (int k = 0; k < C; ++k) s.comm[(long long)e * C + k] = k == word ? 1.0f : 0.0f;
        }
        float ux, uy;
        mpe_action_force<GAME_CONTINUOUS_ACTIONS>(actions.agent(1), GAME_SENSITIVITY, ux, uy);
        long long i = (long long)e * 2 + 1;
        float x = s.x[i], y = s.y[i], vx = s.vx[i], vy = s.vy[i];
        mpe_integrate(x, y, vx, vy, ux, uy, 0.0f);
        s.x[i] = x;
        s.y[i] = y;
        s.vx[i] = vx;
        s.vy[i] = vy;
        long long goal = (long long)e * M + s.goal[e];
        float reward = -mpe_squared_norm(x - s.landmark_x[goal], y - s.landmark_y[goal]);
        rewards[0] = reward;
        rewards[1] = reward;
        s.t[e] = now;
    }

    __device__ static void observe_env(const State& s, Shared&, int e, float* obs, bool*) {
        long long i = (long long)e * 2 + 1;  // the listener
        for (int k = gme_lane(); k < GME_OBS_SIZE; k += gme_lanes()) {
            float value;
            if (k < 3) {
                value = gsl_landmark_colors[3 * s.goal[e] + k];  // the speaker's: the goal's colour
            } else if (k < 5) {
                value = k == 3 ? s.vx[i] : s.vy[i];
            } else if (k < 5 + 2 * M) {
                int l = (k - 5) / 2;
                value = (k - 5) % 2 == 0 ? s.landmark_x[(long long)e * M + l] - s.x[i]
                                         : s.landmark_y[(long long)e * M + l] - s.y[i];
            } else {
                value = s.comm[(long long)e * C + k - 5 - 2 * M];
            }
            obs[k] = value;
        }
    }
};
