// Puck-v0's CUDA C kernels; the rules and the torch reference are in env.py.

struct Puck : GmeEnv {
    __device__ static void reset(float* s, int n, int i, unsigned long long seed, unsigned int episode,
                                 const Params& p) {
        s[i] = gme_uniform(seed, episode, 0, -p.reset_bound, p.reset_bound);
        s[n + i] = 0.0f;
    }

    __device__ static void step(float* s, int n, int i, const Action* actions, const Params& p, float* reward,
                                bool* terminated) {
        float push = (float)(min(max(actions[i], 0LL), 2LL) - 1) * p.force;
        float v = fminf(fmaxf(__fadd_rn(s[n + i], __fmul_rn(p.dt, push)), -p.max_speed), p.max_speed);
        float x = __fadd_rn(s[i], __fmul_rn(p.dt, v));
        s[i] = x;
        s[n + i] = v;
        *reward = -fabsf(x);
        *terminated = fabsf(x) > p.x_limit;
    }

    __device__ static void observe(const float* s, int n, int i, float* obs, const Params&) {
        obs[0] = s[i];
        obs[1] = s[n + i];
    }
};
