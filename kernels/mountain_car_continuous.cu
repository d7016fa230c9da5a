// MountainCarContinuous-v0 for the pycuda backend; the torch reference is
// gpu_marl_envs/envs/mountain_car_continuous.py.
#include "mountain_car.cuh"

struct MountainCarContinuous : GmeEnv {
    static const int action_dim = 1;  // actions arrive as rows of shape (1,)

    __device__ static void reset(float* s, int n, int i, unsigned long long seed, unsigned int episode,
                                 const Params& p) {
        gme_mountain_car_reset(s, n, i, seed, episode, p);
    }

    __device__ static void step(float* s, int n, int i, const Action* actions, const Params& p, float* reward,
                                bool* terminated) {
        float action = actions[i * action_dim + 0];
        action = action != action ? 0.0f : action;  // NaN reads as 0 (the torch backend does so before its step)
        // Gymnasium: force = min(max(action[0], min_action), max_action).
        float force = fminf(fmaxf(action, p.min_action), p.max_action);
        bool term = gme_mountain_car_advance(s, n, i, force * p.power, p);
        // Gymnasium: reward = 100 if terminated else 0, then reward -= pow(action[0], 2) * 0.1, with
        // the unclipped action.
        float base = term ? p.goal_reward : 0.0f;
        *reward = base - action * action * p.action_cost;
        *terminated = term;
    }

    __device__ static void observe(const float* s, int n, int i, float* obs, const Params& p) {
        gme_mountain_car_observe(s, n, i, obs, p);
    }
};
