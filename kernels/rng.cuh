// Counter-based random numbers, bit-identical to gpu_marl_envs/rng.py (read its docstring).
// The constants arrive as -D definitions built from that module, so they are written once.
#pragma once

__device__ __forceinline__ unsigned int gme_mix32(unsigned int x) {
    x ^= x >> 16;
    x *= GME_MIX_MUL_1;
    x ^= x >> 15;
    x *= GME_MIX_MUL_2;
    x ^= x >> 16;
    return x;
}

__device__ __forceinline__ unsigned int gme_random_bits(unsigned long long seed, unsigned int episode,
                                                        unsigned int draw) {
    unsigned int h = gme_mix32((unsigned int)(seed & 0xFFFFFFFFull) ^ GME_SEED_SALT);
    h = gme_mix32(h ^ (unsigned int)(seed >> 32));
    h = gme_mix32(h ^ episode);
    return gme_mix32(h ^ draw);
}

// Computed in double and rounded once, as in rng.py: the product is exact, so FMA contraction
// cannot change the result.
__device__ __forceinline__ float gme_uniform(unsigned long long seed, unsigned int episode, unsigned int draw,
                                             float low, float high) {
    double unit = (double)(gme_random_bits(seed, episode, draw) >> 8) * 0x1p-24;
    return (float)((double)low + ((double)high - (double)low) * unit);
}
