// Pendulum-v1 for the pycuda backend; the torch reference is gpu_marl_envs/envs/pendulum.py.

struct Pendulum : GmeEnv {
    __device__ static void reset(float* s, int n, int i, unsigned long long seed, unsigned int episode,
                                 const Params& p) {
        // Gymnasium draws theta, then theta_dot.
        s[i] = gme_uniform(seed, episode, 0, -p.reset_theta_bound, p.reset_theta_bound);
        s[n + i] = gme_uniform(seed, episode, 1, -p.reset_thdot_bound, p.reset_thdot_bound);
    }

    // Gymnasium's ((x + pi) % (2 pi)) - pi with Python's modulo: fmodf is exact and takes the
    // dividend's sign, so a negative remainder moves up by the (positive) divisor, as torch.remainder.
    __device__ static float angle_normalize(float x, const Params& p) {
        float r = fmodf(x + p.pi, p.two_pi);
        if (r < 0.0f) r += p.two_pi;
        return r - p.pi;
    }

    __device__ static void step(float* s, int n, int i, const Action* actions, const Params& p, float* reward,
                                bool* terminated) {
        float th = s[i], thdot = s[n + i];
        float u = actions[i];
        u = u != u ? 0.0f : u;  // NaN reads as 0 (validation off); fminf/fmaxf alone would drop it
        u = fminf(fmaxf(u, -p.max_torque), p.max_torque);
        // Gymnasium's cost, on the state before the update and the clipped torque.
        float a = angle_normalize(th, p);
        float costs = a * a + p.thdot_cost * (thdot * thdot) + p.torque_cost * (u * u);
        float newthdot = thdot + (p.gravity_coef * sinf(th) + p.torque_coef * u) * p.dt;
        newthdot = fminf(fmaxf(newthdot, -p.max_speed), p.max_speed);
        float newth = th + newthdot * p.dt;  // the clipped velocity moves the angle, as in Gymnasium
        s[i] = newth;
        s[n + i] = newthdot;
        *reward = -costs;
        *terminated = false;
    }

    __device__ static void observe(const float* s, int n, int i, float* obs, const Params& p) {
        float th = s[i];
        obs[0] = cosf(th);
        obs[1] = sinf(th);
        obs[2] = s[n + i];
    }
};
