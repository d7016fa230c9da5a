"""Acrobot-v1 Numba kernels; the torch reference is gpu_marl_envs/envs/acrobot.py, whose float32
operations this transcribes in the same order (read its comments for the Gymnasium correspondences).

Every math.sin/math.cos result is passed through np.float32: a no-op on the GPU (float32 in,
float32 out), and under the CUDA simulator, where math returns a Python float, it keeps the rest
of the arithmetic in float32 as on the device.
"""

import math

import numpy as np
from gpu_marl_envs.kernels import rng_numba
from gpu_marl_envs.kernels.numba_api import cuda

_TWO = np.float32(2.0)
_ZERO = np.float32(0.0)
_MINUS_ONE = np.float32(-1.0)


@cuda.jit(device=True)
def reset(state, n, i, seed, episode, p):
    for k in range(4):
        state[k * n + i] = rng_numba.uniform(seed, episode, k, -p.reset_bound, p.reset_bound)


@cuda.jit(device=True)
def dsdt(p, theta1, theta2, dtheta1, dtheta2, torque):
    """Gymnasium's AcrobotEnv._dsdt, "book" ddtheta2."""
    cos_theta2 = np.float32(math.cos(theta2))
    sin_theta2 = np.float32(math.sin(theta2))
    d1 = p.d1_const + _TWO * p.m2_l1_lc2 * cos_theta2
    d2 = p.d2_const + p.m2_l1_lc2 * cos_theta2
    phi2 = p.phi2_coef * np.float32(math.sin(theta1 + theta2))  # Gymnasium: m2*lc2*g*cos(theta1 + theta2 - pi/2)
    phi1 = (
        -p.m2_l1_lc2 * (dtheta2 * dtheta2) * sin_theta2
        - _TWO * p.m2_l1_lc2 * dtheta2 * dtheta1 * sin_theta2
        + p.phi1_coef * np.float32(math.sin(theta1))
        + phi2
    )
    ddtheta2 = (torque + d2 / d1 * phi1 - p.m2_l1_lc2 * (dtheta1 * dtheta1) * sin_theta2 - phi2) / (
        p.d2_const - d2 * d2 / d1
    )
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return dtheta1, dtheta2, ddtheta1, ddtheta2


@cuda.jit(device=True)
def wrap(x, m, M, iterations):
    """Gymnasium's wrap(x, m, M), its while loops bounded by p.wrap_iterations (see _wrap in
    gpu_marl_envs/envs/acrobot.py)."""
    diff = M - m
    for _ in range(iterations):
        if x > M:
            x = x - diff
    for _ in range(iterations):
        if x < m:
            x = x + diff
    if x > M:
        x = m + np.float32(math.fmod(x - m, diff))
    if x < m:
        x = M - np.float32(math.fmod(M - x, diff))
    return x


@cuda.jit(device=True)
def bound(x, m, M):
    """Gymnasium's bound(x, m, M) = min(max(x, m), M), with Python's comparisons (NaN passes through)."""
    x = m if m > x else x
    return M if M < x else x


@cuda.jit(device=True)
def step(state, n, i, actions, p):
    t1 = state[i]
    t2 = state[n + i]
    v1 = state[2 * n + i]
    v2 = state[3 * n + i]
    a = actions[i]
    a = 0 if a < 0 else (2 if a > 2 else a)  # out-of-range actions clamp into {0, 1, 2}
    torque = np.float32(a - 1) * p.torque_mag  # actions 0, 1, 2 -> -1, 0, +1 torque

    # Gymnasium's rk4(self._dsdt, s_augmented, [0, self.dt]); the torque is held constant.
    k1_0, k1_1, k1_2, k1_3 = dsdt(p, t1, t2, v1, v2, torque)
    k2_0, k2_1, k2_2, k2_3 = dsdt(
        p, t1 + p.half_dt * k1_0, t2 + p.half_dt * k1_1, v1 + p.half_dt * k1_2, v2 + p.half_dt * k1_3, torque
    )
    k3_0, k3_1, k3_2, k3_3 = dsdt(
        p, t1 + p.half_dt * k2_0, t2 + p.half_dt * k2_1, v1 + p.half_dt * k2_2, v2 + p.half_dt * k2_3, torque
    )
    k4_0, k4_1, k4_2, k4_3 = dsdt(p, t1 + p.dt * k3_0, t2 + p.dt * k3_1, v1 + p.dt * k3_2, v2 + p.dt * k3_3, torque)
    t1 = t1 + p.sixth_dt * (k1_0 + _TWO * k2_0 + _TWO * k3_0 + k4_0)
    t2 = t2 + p.sixth_dt * (k1_1 + _TWO * k2_1 + _TWO * k3_1 + k4_1)
    v1 = v1 + p.sixth_dt * (k1_2 + _TWO * k2_2 + _TWO * k3_2 + k4_2)
    v2 = v2 + p.sixth_dt * (k1_3 + _TWO * k2_3 + _TWO * k3_3 + k4_3)

    t1 = wrap(t1, -p.pi, p.pi, p.wrap_iterations)
    t2 = wrap(t2, -p.pi, p.pi, p.wrap_iterations)
    v1 = bound(v1, -p.max_vel_1, p.max_vel_1)
    v2 = bound(v2, -p.max_vel_2, p.max_vel_2)
    state[i] = t1
    state[n + i] = t2
    state[2 * n + i] = v1
    state[3 * n + i] = v2
    # Gymnasium's _terminal: -cos(s[0]) - cos(s[1] + s[0]) > 1.0
    terminated = -np.float32(math.cos(t1)) - np.float32(math.cos(t2 + t1)) > p.target_height
    return (_ZERO if terminated else _MINUS_ONE), terminated


@cuda.jit(device=True)
def observe(state, n, i, obs, p):
    t1 = state[i]
    t2 = state[n + i]
    obs[0] = math.cos(t1)
    obs[1] = math.sin(t1)
    obs[2] = math.cos(t2)
    obs[3] = math.sin(t2)
    obs[4] = state[2 * n + i]
    obs[5] = state[3 * n + i]
