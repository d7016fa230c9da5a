"""Numba twin of gpu_marl_envs/rng.py (the docstring there explains the design).

uint64 arithmetic with explicit 32-bit masks: Numba promotes mixed uint32/int64 expressions to
int64, so uint32 wrap-around would not be reliable.
"""

import numpy as np
from gpu_marl_envs.kernels.numba_api import cuda

from gpu_marl_envs.rng import MIX_MUL_1, MIX_MUL_2, SEED_SALT, UINT32_MASK

_MASK = np.uint64(UINT32_MASK)
_MUL_1 = np.uint64(MIX_MUL_1)
_MUL_2 = np.uint64(MIX_MUL_2)
_SALT = np.uint64(SEED_SALT)
_S8 = np.uint64(8)
_S15 = np.uint64(15)
_S16 = np.uint64(16)
_S32 = np.uint64(32)
_UNIT = np.float64(2.0**-24)


@cuda.jit(device=True)
def mix32(x):
    x = x ^ (x >> _S16)
    x = (x * _MUL_1) & _MASK
    x = x ^ (x >> _S15)
    x = (x * _MUL_2) & _MASK
    return x ^ (x >> _S16)


@cuda.jit(device=True)
def random_bits(seed, episode, draw):
    s = np.uint64(seed)
    h = mix32((s & _MASK) ^ _SALT)
    h = mix32(h ^ ((s >> _S32) & _MASK))
    h = mix32(h ^ (np.uint64(episode) & _MASK))
    return mix32(h ^ np.uint64(draw))


@cuda.jit(device=True)
def uniform(seed, episode, draw, low, high):
    unit = np.float64(random_bits(seed, episode, draw) >> _S8) * _UNIT
    lo = np.float64(low)
    return np.float32(lo + (np.float64(high) - lo) * unit)
