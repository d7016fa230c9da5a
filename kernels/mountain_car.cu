// MountainCar-v0 for the pycuda backend; the torch reference is gpu_marl_envs/envs/mountain_car.py.
#include "mountain_car.cuh"

struct MountainCar : GmeEnv {
    __device__ static void reset(float* s, int n, int i, unsigned long long seed, unsigned int episode,
                                 const Params& p) {
        gme_mountain_car_reset(s, n, i, seed, episode, p);
    }

    __device__ static void step(float* s, int n, int i, const Action* actions, const Params& p, float* reward,
                                bool* terminated) {
        // Out-of-range actions clamp into Discrete(3) (the torch backend clamps before its step).
        long long a = actions[i];
        a = a < 0 ? 0 : (a > 2 ? 2 : a);
        // Gymnasium: (action - 1) * force, i.e. -force, 0 or +force.
        float push = (float)(a - 1) * p.force;
        *terminated = gme_mountain_car_advance(s, n, i, push, p);
        *reward = p.reward_per_step;
    }

    __device__ static void observe(const float* s, int n, int i, float* obs, const Params& p) {
        gme_mountain_car_observe(s, n, i, obs, p);
    }
};
