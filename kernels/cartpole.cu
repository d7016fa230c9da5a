// CartPole-v1 for the pycuda backend; the torch reference is gpu_marl_envs/envs/cartpole.py.

struct CartPole : GmeEnv {
    __device__ static void reset(float* s, int n, int i, unsigned long long seed, unsigned int episode,
                                 const Params& p) {
        for (int k = 0; k < 4; ++k) s[k * n + i] = gme_uniform(seed, episode, k, -p.reset_bound, p.reset_bound);
    }

    __device__ static void step(float* s, int n, int i, const Action* actions, const Params& p, float* reward,
                                bool* terminated) {
        float x = s[i], x_dot = s[n + i], theta = s[2 * n + i], theta_dot = s[3 * n + i];
        float force = actions[i] >= 1 ? p.force_mag : -p.force_mag;  // out-of-range actions clamp into {0, 1}
        float costheta = cosf(theta);
        float sintheta = sinf(theta);
        float temp = (force + p.polemass_length * theta_dot * theta_dot * sintheta) / p.total_mass;
        float thetaacc = (p.gravity * sintheta - costheta * temp) /
                         (p.length * (4.0f / 3.0f - p.masspole * costheta * costheta / p.total_mass));
        float xacc = temp - p.polemass_length * thetaacc * costheta / p.total_mass;
        x = x + p.tau * x_dot;
        x_dot = x_dot + p.tau * xacc;
        theta = theta + p.tau * theta_dot;
        theta_dot = theta_dot + p.tau * thetaacc;
        s[i] = x;
        s[n + i] = x_dot;
        s[2 * n + i] = theta;
        s[3 * n + i] = theta_dot;
        *terminated = x < -p.x_threshold || x > p.x_threshold || theta < -p.theta_threshold_radians ||
                      theta > p.theta_threshold_radians;
        // Gymnasium's sutton_barto_reward: 0 per step, -1 for the terminating one; else +1 for every step.
        *reward = p.sutton_barto_reward ? (*terminated ? -1.0f : 0.0f) : 1.0f;
    }

    __device__ static void observe(const float* s, int n, int i, float* obs, const Params& p) {
        for (int k = 0; k < 4; ++k) obs[k] = s[k * n + i];
    }
};
