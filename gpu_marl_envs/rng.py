"""The counter-based random numbers every backend draws reset states from.

A draw is a pure function of ``(seed, episode, draw index)``: no generator state lives anywhere,
so the torch reference, the Numba kernels (``kernels/rng_numba.py``) and the CUDA C kernels
(``kernels/rng.cuh``) produce the same bits on CPU and GPU, and any sub-env can be reset in any
order. The mixer is Chris Wellons' ``lowbias32`` integer hash (hash-prospector, public domain),
applied once per word of the key.

Turning 24 random bits into a float in ``[low, high)`` is done in float64 and rounded once to
float32: ``(high - low) * u`` is exact in float64 for our ranges (24-bit operands), so no
backend's fused multiply-add can change the result.
"""

from __future__ import annotations

import numpy as np
import torch

MIX_MUL_1 = 0x7FEB352D
MIX_MUL_2 = 0x846CA68B
SEED_SALT = 0x9E3779B9  # 2**32 / golden ratio: keeps seed 0 from hashing a run of zeros
UINT32_MASK = 0xFFFFFFFF
MAX_SEED = 2**63 - 1  # seeds are stored as int64 on the device


def random_seed() -> int:
    """A fresh seed from the OS's entropy, for envs that were never seeded."""
    return int(np.random.SeedSequence().entropy % (MAX_SEED + 1))


def reseed(seeds: torch.Tensor, episodes: torch.Tensor, new: torch.Tensor, mask: torch.Tensor | None) -> None:
    """Give sub-envs (all, or those of ``mask``) new seeds, their episode counters restarting at 0."""
    if mask is None:
        seeds.copy_(new)
        episodes.zero_()
    else:
        seeds.copy_(torch.where(mask, new, seeds))
        episodes.masked_fill_(mask, 0)


def _mul_u32(x: torch.Tensor, c: int) -> torch.Tensor:
    """``x * c mod 2**32`` for uint32 values held in int64, without int64 overflow."""
    lo = x * (c & 0xFFFF)
    hi = ((x * (c >> 16)) & 0xFFFF) << 16
    return (lo + hi) & UINT32_MASK


def mix32(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 on uint32 values held in an int64 tensor."""
    x = x ^ (x >> 16)
    x = _mul_u32(x, MIX_MUL_1)
    x = x ^ (x >> 15)
    x = _mul_u32(x, MIX_MUL_2)
    return x ^ (x >> 16)


def key_hash(seeds: torch.Tensor, episodes: torch.Tensor) -> torch.Tensor:
    """The hash of each (seed, episode) key, shared by all of that episode's draws."""
    seeds = seeds.to(torch.int64)
    h = mix32((seeds & UINT32_MASK) ^ SEED_SALT)
    h = mix32(h ^ ((seeds >> 32) & UINT32_MASK))
    return mix32(h ^ (episodes.to(torch.int64) & UINT32_MASK))


def random_bits(seeds: torch.Tensor, episodes: torch.Tensor, draw: int) -> torch.Tensor:
    """32 random bits (as int64) per element for draw number ``draw`` of each (seed, episode)."""
    return mix32(key_hash(seeds, episodes) ^ draw)


def uniform_from_key(key: torch.Tensor, draw: int, low: float, high: float) -> torch.Tensor:
    """float32 samples in ``[low, high)`` from a :func:`key_hash`; ``low``, ``high`` float32 values."""
    unit = (mix32(key ^ draw) >> 8).to(torch.float64) * 2.0**-24
    return (low + (high - low) * unit).to(torch.float32)


def uniform(seeds: torch.Tensor, episodes: torch.Tensor, draw: int, low: float, high: float) -> torch.Tensor:
    """float32 samples in ``[low, high)``; ``low`` and ``high`` must be float32 values."""
    return uniform_from_key(key_hash(seeds, episodes), draw, low, high)
