// Acrobot-v1 for the pycuda backend; the torch reference is gpu_marl_envs/envs/acrobot.py, whose
// float32 operations this transcribes in the same order (read its comments for the Gymnasium
// correspondences).

struct Acrobot : GmeEnv {
    __device__ static void reset(float* s, int n, int i, unsigned long long seed, unsigned int episode,
                                 const Params& p) {
        for (int k = 0; k < 4; ++k) s[k * n + i] = gme_uniform(seed, episode, k, -p.reset_bound, p.reset_bound);
    }

    // Gymnasium's AcrobotEnv._dsdt, "book" ddtheta2: y = (theta1, theta2, dtheta1, dtheta2), dy its derivative.
    __device__ static void dsdt(const Params& p, const float y[4], float torque, float dy[4]) {
        float theta1 = y[0], theta2 = y[1], dtheta1 = y[2], dtheta2 = y[3];
        float cos_theta2 = cosf(theta2);
        float sin_theta2 = sinf(theta2);
        float d1 = p.d1_const + 2.0f * p.m2_l1_lc2 * cos_theta2;
        float d2 = p.d2_const + p.m2_l1_lc2 * cos_theta2;
        float phi2 = p.phi2_coef * sinf(theta1 + theta2);  // Gymnasium: m2*lc2*g*cos(theta1 + theta2 - pi/2)
        float phi1 = -p.m2_l1_lc2 * (dtheta2 * dtheta2) * sin_theta2 -
                     2.0f * p.m2_l1_lc2 * dtheta2 * dtheta1 * sin_theta2 + p.phi1_coef * sinf(theta1) + phi2;
        float ddtheta2 = (torque + d2 / d1 * phi1 - p.m2_l1_lc2 * (dtheta1 * dtheta1) * sin_theta2 - phi2) /
                         (p.d2_const - d2 * d2 / d1);
        float ddtheta1 = -(d2 * ddtheta2 + phi1) / d1;
        dy[0] = dtheta1;
        dy[1] = dtheta2;
        dy[2] = ddtheta1;
        dy[3] = ddtheta2;
    }

    // Gymnasium's wrap(x, m, M), its while loops bounded by p.wrap_iterations (see _wrap in
    // gpu_marl_envs/envs/acrobot.py).
    __device__ static float wrap(float x, float m, float M, int iterations) {
        float diff = M - m;
        for (int k = 0; k < iterations; ++k) x = x > M ? x - diff : x;
        for (int k = 0; k < iterations; ++k) x = x < m ? x + diff : x;
        if (x > M) x = m + fmodf(x - m, diff);
        if (x < m) x = M - fmodf(M - x, diff);
        return x;
    }

    // Gymnasium's bound(x, m, M) = min(max(x, m), M), with Python's comparisons (NaN passes through,
    // unlike fminf/fmaxf).
    __device__ static float bound(float x, float m, float M) {
        x = m > x ? m : x;
        return M < x ? M : x;
    }

    __device__ static void step(float* s, int n, int i, const Action* actions, const Params& p, float* reward,
                                bool* terminated) {
        float y0[4] = {s[i], s[n + i], s[2 * n + i], s[3 * n + i]};
        long long a = actions[i];
        a = a < 0 ? 0 : (a > 2 ? 2 : a);  // out-of-range actions clamp into {0, 1, 2}
        float torque = (float)(a - 1) * p.torque_mag;  // actions 0, 1, 2 -> -1, 0, +1 torque

        // Gymnasium's rk4(self._dsdt, s_augmented, [0, self.dt]); the torque is held constant.
        float k1[4], k2[4], k3[4], k4[4], y[4];
        dsdt(p, y0, torque, k1);
#pragma unroll
        for (int k = 0; k < 4; ++k) y[k] = y0[k] + p.half_dt * k1[k];
        dsdt(p, y, torque, k2);
#pragma unroll
        for (int k = 0; k < 4; ++k) y[k] = y0[k] + p.half_dt * k2[k];
        dsdt(p, y, torque, k3);
#pragma unroll
        for (int k = 0; k < 4; ++k) y[k] = y0[k] + p.dt * k3[k];
        dsdt(p, y, torque, k4);
#pragma unroll
        for (int k = 0; k < 4; ++k) y[k] = y0[k] + p.sixth_dt * (k1[k] + 2.0f * k2[k] + 2.0f * k3[k] + k4[k]);

        float theta1 = wrap(y[0], -p.pi, p.pi, p.wrap_iterations);
        float theta2 = wrap(y[1], -p.pi, p.pi, p.wrap_iterations);
        float dtheta1 = bound(y[2], -p.max_vel_1, p.max_vel_1);
        float dtheta2 = bound(y[3], -p.max_vel_2, p.max_vel_2);
        s[i] = theta1;
        s[n + i] = theta2;
        s[2 * n + i] = dtheta1;
        s[3 * n + i] = dtheta2;
        // Gymnasium's _terminal: -cos(s[0]) - cos(s[1] + s[0]) > 1.0
        bool term = -cosf(theta1) - cosf(theta2 + theta1) > p.target_height;
        *terminated = term;
        *reward = term ? 0.0f : -1.0f;
    }

    __device__ static void observe(const float* s, int n, int i, float* obs, const Params& p) {
        float theta1 = s[i], theta2 = s[n + i];
        obs[0] = cosf(theta1);
        obs[1] = sinf(theta1);
        obs[2] = cosf(theta2);
        obs[3] = sinf(theta2);
        obs[4] = s[2 * n + i];
        obs[5] = s[3 * n + i];
    }
};
