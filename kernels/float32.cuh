// float32 operations that the kernels share with their references bit for bit (gpu_marl_envs/float32.py).
// GME_CORRECTED_LOW / GME_CORRECTED_HIGH arrive with the runtime's constants (float32.CORRECTED_DIVIDENDS).
#pragma once

// x / divisor as a true float32 division (the reference's). `reciprocal` and `exact`, constants of
// the kernel (so every branch on them is decided at compile time), choose how:
// - exact: reciprocal is 1 / divisor exactly (a power of two), and x * reciprocal is the quotient;
// - else a non-zero reciprocal is float32(1 / divisor), checked by float32.corrected_reciprocal:
//   one correction (two FMAs) of q = x * reciprocal is the quotient for every |x| within
//   GME_CORRECTED_LOW..HIGH. A zero's quotient is q (a zero of x's sign); the rare others (tiny,
//   huge, inf, NaN) divide;
// - else a division, a zero x divided as a one and its quotient taken from a product: CUDA's
//   division leaves its fast path for a zero dividend, which a warp's lanes meet often.
// The correction is a product and two FMAs where a division takes a dozen instructions and a branch.
__device__ __forceinline__ float gme_divide(float x, float divisor, float reciprocal, bool exact) {
    if (reciprocal != 0.0f) {
        float q = __fmul_rn(x, reciprocal);
        if (exact) return q;
        float magnitude = fabsf(x);
        if (magnitude >= GME_CORRECTED_LOW && magnitude <= GME_CORRECTED_HIGH)
            return __fmaf_rn(__fmaf_rn(-q, divisor, x), reciprocal, q);
        return x == 0.0f ? q : __fdiv_rn(x, divisor);
    }
    bool zero = x == 0.0f;
    float quotient = __fdiv_rn(zero ? 1.0f : x, divisor);
    return zero ? __fmul_rn(x, divisor) : quotient;
}
