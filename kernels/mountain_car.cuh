// What MountainCar-v0 and MountainCarContinuous-v0 share: reset, observation and the physics of
// one step. Twin of gpu_marl_envs/envs/mountain_car.py (reset, advance, observe); both envs' params
// structs (GmeParams, from their kernel_params) name these fields alike, so each function is a template
// over Params.
#pragma once
#include "classic.cuh"

// Gymnasium: state = [uniform(low=-0.6, high=-0.4), 0]. Draw 0 is the position; the velocity is
// written as 0 directly (no draw), as the torch reference does.
template <class Params>
__device__ __forceinline__ void gme_mountain_car_reset(float* s, int n, int i, unsigned long long seed,
                                                       unsigned int episode, const Params& p) {
    s[i] = gme_uniform(seed, episode, 0, p.reset_low, p.reset_high);
    s[n + i] = 0.0f;
}

// One step from env i's state given the action's velocity change `push`; returns terminated.
// Gymnasium writes `velocity += (action - 1) * force + cos(3 * position) * (-gravity)` (discrete)
// and `velocity += force * power - 0.0025 * cos(3 * position)` (continuous): `a + c * (-g)` and
// `a - g * c` round identically, so one form serves both.
template <class Params>
__device__ __forceinline__ bool gme_mountain_car_advance(float* s, int n, int i, float push, const Params& p) {
    float position = s[i], velocity = s[n + i];
    velocity = velocity + (push - p.gravity * cosf(p.hill_frequency * position));
    velocity = fminf(fmaxf(velocity, -p.max_speed), p.max_speed);
    position = position + velocity;
    position = fminf(fmaxf(position, p.min_position), p.max_position);
    // Inelastic collision with the left wall: the car stops there.
    if (position == p.min_position && velocity < 0.0f) velocity = 0.0f;
    s[i] = position;
    s[n + i] = velocity;
    return position >= p.goal_position && velocity >= p.goal_velocity;
}

template <class Params>
__device__ __forceinline__ void gme_mountain_car_observe(const float* s, int n, int i, float* obs, const Params& p) {
    obs[0] = s[i];
    obs[1] = s[n + i];
}
