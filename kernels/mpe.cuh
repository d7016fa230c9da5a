// MPE2's particle physics in float32, shared by the MPE games' CUDA C kernels: the twin of
// gpu_marl_envs/envs/mpe_physics.py (the reference, whose docstring gives MPE2's rules and the float32
// formulation) and kernels/mpe_numba.py. Every product and sum is rounded as the reference rounds it
// (__fmul_rn/__fadd_rn: no fused multiply-adds), divisions and square roots are IEEE's, and exp/log1p
// are written with those operations only, so the kernels match the reference bit for bit.
// Reads the game's constants GAME_DT, GAME_VELOCITY_KEEP, GAME_CONTACT_FORCE, GAME_CONTACT_MARGIN,
// GAME_EXP_MIN, GAME_LOG2E, GAME_LN2_HI, GAME_LN2_LO, GAME_EXP_COEFFICIENTS, GAME_LOG1P_COEFFICIENTS
// (mpe_physics.physics_constants(), in every MPE game's kernel_constants).
#pragma once

// e**x for x <= 3, 0 below GAME_EXP_MIN: 2**n p(r), n = floor(x log2(e) + 1/2), r = x - n ln 2.
__device__ __forceinline__ float mpe_exp(float x) {
    constexpr float c[] = GAME_EXP_COEFFICIENTS;
    float n = floorf(__fadd_rn(__fmul_rn(x, GAME_LOG2E), 0.5f));
    float r = __fadd_rn(__fadd_rn(x, -__fmul_rn(n, GAME_LN2_HI)), -__fmul_rn(n, GAME_LN2_LO));
    float p = c[0];
#pragma unroll
    for (int k = 1; k < (int)(sizeof(c) / sizeof(c[0])); ++k) p = __fadd_rn(__fmul_rn(p, r), c[k]);
    int e = min(max((int)n, -126), 127);
    return x < GAME_EXP_MIN ? 0.0f : __fmul_rn(p, __int_as_float((e + 127) << 23));
}

// t / d for d = t + 2 rounded (t >= 0), as IEEE's division rounds it, without its slow path. Where d is
// 2 (t <= 2**-23: an exp that is 0 or tiny, common for pairs near the edge of their reach), t / 2 and
// t * 0.5 are the same real number, so both round alike, denormals included, and no division is done;
// elsewhere the quotient is normal, which the division's fast path computes. That slow path (a call,
// where the quotient's range check fails on a tiny or zero t) was entered by 2 warps in 3 reaching it
// in a SimpleSpread contact pair under ncu.
__device__ __forceinline__ float mpe_quotient_by_sum(float t, float d) {
    if (d == 2.0f) return __fmul_rn(t, 0.5f);
    return t / d;
}

// log(1 + t) for t in [0, 1]: 2 atanh(u), u = t / (2 + t).
__device__ __forceinline__ float mpe_log1p_unit(float t) {
    constexpr float c[] = GAME_LOG1P_COEFFICIENTS;
    float u = mpe_quotient_by_sum(t, __fadd_rn(t, 2.0f));
    float w = __fmul_rn(u, u);
    float p = c[0];
#pragma unroll
    for (int k = 1; k < (int)(sizeof(c) / sizeof(c[0])); ++k) p = __fadd_rn(__fmul_rn(p, w), c[k]);
    return __fmul_rn(__fmul_rn(u, p), 2.0f);
}

// logaddexp(0, -gap / margin) * margin.
__device__ __forceinline__ float mpe_penetration(float gap) {
    float z = -gap / GAME_CONTACT_MARGIN;
    return __fmul_rn(__fadd_rn(fmaxf(z, 0.0f), mpe_log1p_unit(mpe_exp(-fabsf(z)))), GAME_CONTACT_MARGIN);
}

__device__ __forceinline__ float mpe_squared_norm(float dx, float dy) {
    return __fadd_rn(__fmul_rn(dx, dx), __fmul_rn(dy, dy));
}

// mpe_contact's force of a pair within its reach, d2 its squared distance.
__device__ __forceinline__ void mpe_contact_within_reach(float dx, float dy, float d2, float dist_min, float& tx,
                                                         float& ty) {
    float dist = sqrtf(d2);
    float pen = mpe_penetration(__fadd_rn(dist, -dist_min));
    tx = __fmul_rn(__fmul_rn(GAME_CONTACT_FORCE, dx) / dist, pen);
    ty = __fmul_rn(__fmul_rn(GAME_CONTACT_FORCE, dy) / dist, pen);
}

// The contact force (tx, ty) on body i of a pair at p_i - p_j = (dx, dy); false (and no force) where the
// pair is beyond its reach (d2 >= reach2: an exact 0 there). Body j's is exactly (-tx, -ty): p_j - p_i
// is -(p_i - p_j) in float32, and the rounded products and quotient keep the sign.
__device__ __forceinline__ bool mpe_contact(float dx, float dy, float dist_min, float reach2, float& tx, float& ty) {
    float d2 = mpe_squared_norm(dx, dy);
    if (!(d2 < reach2)) return false;
    mpe_contact_within_reach(dx, dy, d2, dist_min, tx, ty);
    return true;
}

// Adds to (fx, fy) the contact force of a pair at p_i - p_j = (dx, dy) (mpe_contact).
__device__ __forceinline__ void mpe_add_contact(float dx, float dy, float dist_min, float reach2, float& fx,
                                                float& fy) {
    float tx, ty;
    if (mpe_contact(dx, dy, dist_min, reach2, tx, ty)) {
        fx = __fadd_rn(fx, tx);
        fy = __fadd_rn(fy, ty);
    }
}

// Adds every contact force among n bodies held in one lane's registers (a game stepped on one lane) to
// (fx, fy): pair (a, j), a < j, adds (tx, ty) to body a's and (-tx, -ty) to body j's, in the pairs' order
// (a, then j), as a loop over the pairs would. The lane computes the force once for each pair within its
// reach, one pair a round: a warp runs as many rounds as its lanes have such pairs at most (1 or 2 for
// SimpleSpread's 3 agents, whose pairs are seldom within reach), where a branch for each pair ran the
// force for every pair that any lane of the warp had within reach (ncu: nearly every warp entered each
// of the 3 branches). SimpleSpread, a captured step on an H200: 6.90 µs against 7.16 at 65,536 games
// with Discrete actions, 2.49 against 2.58 at 2,000; with Box actions 2.54 against 2.69 at 2,000, but
// 7.99 against 7.89 at 65,536 (docs/benchmarks/mpe.md).
template <int n>
__device__ __forceinline__ void mpe_add_contacts(const float (&x)[n], const float (&y)[n], float dist_min,
                                                 float reach2, float (&fx)[n], float (&fy)[n]) {
    static_assert(n * (n - 1) / 2 <= 32, "a lane's pairs are the bits of one word");
    unsigned int reaching = 0;  // bit p: pair p (in the pairs' order) is within its reach
#pragma unroll
    for (int a = 0, p = 0; a < n; ++a) {
#pragma unroll
        for (int j = a + 1; j < n; ++j, ++p) reaching |= (mpe_squared_norm(x[a] - x[j], y[a] - y[j]) < reach2) << p;
    }
    while (reaching) {
        const int q = __ffs(reaching) - 1;  // the lowest pair left
        reaching &= reaching - 1;
        float dx = 0.0f, dy = 0.0f;
#pragma unroll
        for (int a = 0, p = 0; a < n; ++a) {
#pragma unroll
            for (int j = a + 1; j < n; ++j, ++p) {
                if (p == q) {
                    dx = x[a] - x[j];
                    dy = y[a] - y[j];
                }
            }
        }
        float tx, ty;
        mpe_contact_within_reach(dx, dy, mpe_squared_norm(dx, dy), dist_min, tx, ty);
#pragma unroll
        for (int a = 0, p = 0; a < n; ++a) {
#pragma unroll
            for (int j = a + 1; j < n; ++j, ++p) {
                if (p == q) {
                    fx[a] = __fadd_rn(fx[a], tx);
                    fy[a] = __fadd_rn(fy[a], ty);
                    fx[j] = __fadd_rn(fx[j], -tx);
                    fy[j] = __fadd_rn(fy[j], -ty);
                }
            }
        }
    }
}

// One agent's action force: a Discrete action (clamped into 0..4) or a Box one (components 1..4 read,
// NaN as 0 (multi_agent.cuh's gme_nan_to_zero), clipped into [0, 1]), times the sensitivity.
template <bool continuous, class Action>
__device__ __forceinline__ void mpe_action_force(const Action* action, float sensitivity, float& ux, float& uy) {
    if constexpr (continuous) {
        float a[5];
#pragma unroll
        for (int k = 1; k < 5; ++k) a[k] = fminf(fmaxf(gme_nan_to_zero((float)action[k]), 0.0f), 1.0f);
        ux = __fmul_rn(__fadd_rn(a[2], -a[1]), sensitivity);
        uy = __fmul_rn(__fadd_rn(a[4], -a[3]), sensitivity);
    } else {
        long long index = (long long)action[0];
        int k = index < 0 ? 0 : (index > 4 ? 4 : (int)index);  // (compared in 32 bits from here)
        ux = k == 1 ? -sensitivity : (k == 2 ? sensitivity : 0.0f);
        uy = k == 3 ? -sensitivity : (k == 4 ? sensitivity : 0.0f);
    }
}

// MPE2's integration (mass 1): p += v dt; v = v (1 - damping) + f dt; then the speed cap where
// max_speed > 0 (a scenario's agents without one pass 0).
__device__ __forceinline__ void mpe_integrate(float& x, float& y, float& vx, float& vy, float fx, float fy,
                                              float max_speed) {
    x = __fadd_rn(x, __fmul_rn(vx, GAME_DT));
    y = __fadd_rn(y, __fmul_rn(vy, GAME_DT));
    vx = __fadd_rn(__fmul_rn(vx, GAME_VELOCITY_KEEP), __fmul_rn(fx, GAME_DT));
    vy = __fadd_rn(__fmul_rn(vy, GAME_VELOCITY_KEEP), __fmul_rn(fy, GAME_DT));
    if (max_speed > 0.0f) {
        float speed = sqrtf(mpe_squared_norm(vx, vy));
        if (speed > max_speed) {
            vx = __fmul_rn(vx / speed, max_speed);
            vy = __fmul_rn(vy / speed, max_speed);
        }
    }
}

// The team's tree sum of sums[0 .. slots - 1] (slots a power of two) into sums[0], as
// mpe_physics.pairwise_sum: sums[k] += sums[k + h] for h = slots / 2, ..., 1. Every thread calls it;
// it starts and ends with the team synchronised.
__device__ __forceinline__ void mpe_tree_sum(float* sums, int slots) {
    gme_sync();
    for (int h = slots / 2; h > 0; h /= 2) {
        for (int k = gme_lane(); k < h; k += gme_lanes()) sums[k] = __fadd_rn(sums[k], sums[k + h]);
        gme_sync();
    }
}

// A game's bodies staged in its team's shared array for the observations (mpe_observe_body): its n
// agents' x, then their y, vx and vy, then its places' (landmarks', obstacles') x and y: 4 n + 2 places
// floats. Ends with the team synchronised.
__device__ __forceinline__ void mpe_stage_bodies(const float* x, const float* y, const float* vx, const float* vy,
                                                 const float* place_x, const float* place_y, int n, int places,
                                                 float* bodies) {
    for (int a = gme_lane(); a < n; a += gme_lanes()) {
        bodies[a] = x[a];
        bodies[n + a] = y[a];
        bodies[2 * n + a] = vx[a];
        bodies[3 * n + a] = vy[a];
    }
    for (int l = gme_lane(); l < places; l += gme_lanes()) {
        bodies[4 * n + l] = place_x[l];
        bodies[4 * n + places + l] = place_y[l];
    }
    gme_sync();
}

// Agent a's features in MPE2's layout for a moving body, into its observation row o: its velocity and
// position, each place's offset from it, then each other agent's offset, in id order (4 + 2 places +
// 2 (n - 1) floats), from the staged bodies (mpe_stage_bodies). The whole team calls it for one agent:
// each kind of feature is a loop of the team's lanes over its range of the row. (A loop over a game's
// observation floats, each picking its kind, ran ~40 instructions a float: 2/3 of SimpleSpread's step
// under ncu.)
__device__ __forceinline__ void mpe_observe_body(const float* bodies, int n, int places, int a, float* o) {
    for (int f = gme_lane(); f < 4; f += gme_lanes()) o[f] = bodies[(f < 2 ? 2 * n : 0) + (f & 1) * n + a];
    for (int q = gme_lane(); q < 2 * places; q += gme_lanes()) {
        int y = q & 1;
        o[4 + q] = bodies[4 * n + y * places + (q >> 1)] - bodies[y * n + a];
    }
    for (int q = gme_lane(); q < 2 * (n - 1); q += gme_lanes()) {
        int y = (q & 1) * n, j = q >> 1;
        o[4 + 2 * places + q] = bodies[y + j + (j >= a)] - bodies[y + a];
    }
}

// The n agents' positions of one game (from its state's row) into the team's shared arrays sx, sy;
// ends with the team synchronised, so that every thread reads the staged positions.
__device__ __forceinline__ void mpe_stage(const float* x, const float* y, float* sx, float* sy, int n) {
    for (int a = gme_lane(); a < n; a += gme_lanes()) {
        sx[a] = x[a];
        sy[a] = y[a];
    }
    gme_sync();
}
